"""Plain-PyTorch models for `topowise ... --model examples.models.NAME:build` (docs/model-profile.md)."""
