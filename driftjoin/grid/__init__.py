"""The grid similarity join: 1-Bucket-Theta partitioning with block (BLAS) kernels.

An exact similarity join for vectors of any dimension. S3J's metric-space partitioning
(``driftjoin.s3j``) prunes by balls of radius ``2t``; when distances concentrate (embeddings
of tens to hundreds of dimensions) a record lands in the outer set of many worksets and the
pruning is lost. The grid does not prune across workers: it partitions the *join matrix*
(``layout``), so each record is copied to about ``sqrt(p)`` workers whatever the dimension,
and each worker joins its cells with matrix products screened by safe rounding bounds and
decided by the exact distance (``driftjoin.blockjoin``). ``choice`` estimates both methods'
costs on a sample and picks one (``algorithm="auto"``).
"""
