"""Hugging Face checkpoints in and out: config.json <-> ModelSpec, tensor-name maps,
memory-mapped safetensors loading, hub downloads and save_pretrained.

Submodules are imported where used (``zoo.from_pretrained`` loads ``zoo.hub.loading``), so
``zoo.hub.config`` stays importable without touching huggingface_hub.
"""
