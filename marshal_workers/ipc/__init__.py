"""The contract between the supervisor and its children: the pipe messages (`messages`), the
exit codes and end notes (`exits`), the lease and call state in shared memory (`sharedlease`,
`callstate`), and the fork server children start from (`forkserver`).

Both processes import it. `messages` and `exits` are pure (the core uses them); the others
touch shared memory and processes. Imports `protocol` and `common` only, never the child,
the supervisor or the core. `forkserver` guards the fork server when imported: only the
supervisor's start-up (`supervisor.run`) and the fork server itself import it at run time.
"""
