"""Training: objectives per topology, optimizers, mixed precision, checkpointing, short runs.

A training step is forward, loss, backward and optimizer step over one zoo model; the
objective follows the model's topology (causal-LM decoders, masked-LM encoders, teacher-forced
encoder-decoders). Runs are seeded and bit-identical on the CPU; checkpoints are safetensors.
"""
