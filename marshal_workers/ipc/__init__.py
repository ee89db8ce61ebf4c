"""The contract between the supervisor and its children, as pure data: the pipe messages
(`messages`, with the latency buckets the children's statistics count in) and the exit codes
and end notes (`exits`). The plumbing that carries them (the fork server, shared memory) is
`childlink`.

Both processes, the member's core and the simulator import it. Pure: imports only `protocol`
and `common.errors`, does no I/O and reads no clock (tests/unit/project/test_pure_core.py
checks every module).
"""
