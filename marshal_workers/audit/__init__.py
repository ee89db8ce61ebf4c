"""`marshal-audit`: what the fleet did, proven from the coordination log (and the ledgers).

The pipeline runs on Spark (PySpark): it folds every coordination partition with the same pure
rationalizer the supervisors use, derives the audit tables from the events, checks the
handlers' ledgers against the claim intervals, and writes Parquet tables and an HTML report.
See docs/audit.md for the tables and their columns.

A tool, in its own process (and Spark's). Imports `protocol`, `log`, `config`, `clients`,
`common` and `localkafka` (the cached jars); never the supervisor, the child or `childlink`.
"""
