"""S3J: exact streaming similarity joins in a general metric space (engine-agnostic core).

Space partitioning (:mod:`.space`), workset formulation (:mod:`.workset`), similarity
computation (:mod:`.compute`), the brute-force oracle (:mod:`.oracle`) and an in-process
driver that runs them over micro-batches (:mod:`.engine`). Nothing here imports Spark.
"""
