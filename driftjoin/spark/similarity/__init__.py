"""``similarity_join`` (S3J and the 1-Bucket-Theta grid) on Spark: API, operators, the
``auto`` choice, ``choose_threshold`` and the workset balancer's controller."""
