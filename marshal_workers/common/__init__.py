"""What every process and tool shares: errors and exit codes (`errors`), logging (`logs`),
stack dumps (`stacks`), the lease clock (`leaseclock`), and running a click command as a
console script (`consolescripts`).

Imports nothing of the project.
"""
