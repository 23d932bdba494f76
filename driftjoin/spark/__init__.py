"""Thin Spark adapters that run the engine-agnostic cores inside Structured Streaming."""
