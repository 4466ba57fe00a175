"""Adapters that offer hermes-store to other agent runtimes (optional extras)."""
