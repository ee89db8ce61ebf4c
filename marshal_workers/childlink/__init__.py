"""How the supervisor starts its children and shares state with them: the fork server children
start from (`forkserver`), and the lease and the handler's call state in shared memory
(`sharedlease`, `callstate`), written by one process and read by the other.

Runs in the supervisor, the fork server and the child. Imports `protocol`, `common` and the
pure messages (`ipc`) only, never the child, the supervisor or the core. `forkserver` guards
the fork server when imported: only the supervisor's start-up (`supervisor.launch`, which
starts the server before the supervisor's other imports, and `supervisor.run`) and the fork
server itself import it at run time. `preloaded`, imported by the fork server last, freezes
what its imports made before the first fork.
"""
