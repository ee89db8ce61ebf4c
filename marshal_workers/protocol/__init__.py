"""The Marshal protocol, pure: the coordination log's wire format, the fold (`rationalizer`)
every reader agrees on, and the facts derived from it (members, leases, poison records, group
status, the Go fleet's fold).

Runs wherever the log is read: the supervisor, the tools, the simulator. The child loads only
`modes`, `leases` (its shared lease's rule) and `slicing` (a slice's type), never the fold
(tests/unit/project/test_package_rules.py). Imports nothing of the project and does no I/O and
reads no clock (the purity test, tests/unit/project/test_pure_core.py, checks every module).
"""
