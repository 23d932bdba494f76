"""Benchmark data sets of embeddings: Gaussian clusters, anisotropic clusters and real text.

- ``gaussian``: 16 isotropic Gaussian clusters (spread 0.1) in ``[-0.8, 0.8]^dim`` (the
  generator of :mod:`driftjoin.generators.vectors`).
- ``aniso``: 16 clusters, each a Gaussian stretched along a few random directions (a decaying
  spectrum, like real embeddings whose variance sits in few directions), then L2-normalised.
- ``text``: TF-IDF + truncated SVD (scikit-learn) of a real corpus every installation has on
  disk: the first paragraph of the docstrings of the installed Python packages' modules,
  classes and functions (numpy, scipy, pandas, pyspark, matplotlib, ... tens of thousands of
  short technical descriptions), L2-normalised. The corpus is cached under ``bench/results``.
  Its size bounds the rows of this set (about 4e4 distinct descriptions with the pinned
  dependencies); a larger request is refused.

All vectors are float32 (what embedding models emit); every set is a pure function of its
arguments.
"""

from __future__ import annotations

import ast
import json
import os
import sysconfig
from pathlib import Path

import numpy as np

from driftjoin.generators.vectors import generate_vectors

DATASETS = ("gaussian", "aniso", "text")
#: Packages whose docstrings make the text corpus (those installed with driftjoin's pins).
CORPUS_PACKAGES = ("numpy", "scipy", "pandas", "pyspark", "matplotlib", "pyarrow", "hypothesis", "numba", "sklearn")
CACHE = Path("bench/results/cache")


def embeddings(name: str, n: int, dim: int, seed: int = 1) -> np.ndarray:
    """``n`` vectors of data set ``name`` in ``dim`` dimensions (float32)."""
    if name == "gaussian":
        return generate_vectors("gaussian", seed=seed, stream=0, start=0, count=n, dim=dim, clusters=16, spread=0.1).astype(np.float32)
    if name == "aniso":
        return _anisotropic(n, dim, seed)
    if name == "text":
        return _text(n, dim, seed)
    raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}")


def _unit(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):  # an all-zero row (e.g. only stop words) becomes NaN, dropped
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _anisotropic(n: int, dim: int, seed: int, clusters: int = 16) -> np.ndarray:
    rng = np.random.default_rng([seed, dim, 11])
    centres = rng.normal(size=(clusters, dim))
    rank = max(2, min(dim, 8))
    # per cluster: a few principal directions with decaying scale, plus small isotropic noise
    bases = rng.normal(size=(clusters, rank, dim)) / np.sqrt(dim)
    scales = 1.5 * 0.6 ** np.arange(rank)
    which = rng.integers(0, clusters, n)
    coef = rng.normal(size=(n, rank)) * scales
    x = centres[which] + np.einsum("nr,nrd->nd", coef, bases[which]) + rng.normal(scale=0.05, size=(n, dim))
    return _unit(x)


def corpus() -> list[str]:
    """The distinct docstring paragraphs of :data:`CORPUS_PACKAGES` (cached; sorted, so deterministic)."""
    path = CACHE / "docstring_corpus.json"
    if path.exists():
        return json.loads(path.read_text())
    root = Path(sysconfig.get_paths()["purelib"])
    docs: set[str] = set()
    for pkg in CORPUS_PACKAGES:
        for dirpath, dirnames, files in os.walk(root / pkg):
            dirnames[:] = [d for d in dirnames if d not in ("tests", "test", "testing")]
            for f in files:
                if not f.endswith(".py"):
                    continue
                try:
                    tree = ast.parse(Path(dirpath, f).read_text(encoding="utf-8"))
                except (SyntaxError, UnicodeDecodeError, ValueError):
                    continue
                for node in ast.walk(tree):
                    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                        doc = ast.get_docstring(node, clean=True)
                        if doc:
                            para = " ".join(doc.strip().split("\n\n")[0].split())
                            if len(para.split()) >= 4:
                                docs.add(para)
    out = sorted(docs)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def _text(n: int, dim: int, seed: int) -> np.ndarray:
    path = CACHE / f"text_{dim}_{seed}.npy"
    if path.exists():
        full = np.load(path)
    else:
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer

        docs = corpus()
        tfidf = TfidfVectorizer(sublinear_tf=True, min_df=2, stop_words="english").fit_transform(docs)
        full = _unit(TruncatedSVD(n_components=dim, random_state=seed).fit_transform(tfidf))
        full = full[np.isfinite(full).all(axis=1)]
        np.save(path, full)
    if n > len(full):
        raise ValueError(f"the text set has {len(full):,} vectors; asked for {n:,} (use gaussian or aniso for more)")
    return full[np.sort(np.random.default_rng(seed).choice(len(full), n, replace=False))]
