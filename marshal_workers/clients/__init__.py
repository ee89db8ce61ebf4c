"""What every Kafka client of the package shares: the one configuration builder
(`kafkaconfig`: merge order and the settings safety pins), librdkafka's log and connect
defaults (`rdkafka`), and the check of a user's ``[kafka]`` table (`tablecheck`).

Runs in every process that talks to Kafka (supervisor, child, tools). Imports `common` only.
"""
