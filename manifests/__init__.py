"""Manifest schema, signing and verification. Torch-free by design."""
