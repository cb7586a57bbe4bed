"""Example PySpark pipelines: a feed ingest writing daily partitions, a transform triggered by N of them, a
report triggered by the transform's success. `make demo` chains them on the embedded broker."""
