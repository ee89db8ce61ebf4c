"""The coordination log's I/O: the `CoordinationLog` interface, its Kafka (`kafkalog`) and
in-memory (`memlog`) implementations, the folding reader (`foldedlog`), and the coordination
topic's administration (`topicadmin`, `partitioncount`).

Runs in the supervisor and the tools, never in the child. Imports `protocol`, `clients` and
`common` only.
"""
