"""marshal-workers: Kafka partition ownership through Kafka alone (the Marshal protocol).

One package per process boundary, lower layers first: `common`; `protocol` (pure); `clients`,
`config`, `ipc`, `handler`; `core` (pure), `log`, `child`; `supervisor`; and the tools `admin`,
`audit`, `sim`, `localkafka`. A package imports only the layers below it
(tests/unit/project/test_package_rules.py holds the table).
"""

__version__ = "0.1.0"
