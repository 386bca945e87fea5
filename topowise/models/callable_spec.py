"""CallableSpec: what the cost model needs of any PyTorch model given as `module:function`, read on the
meta device by topowise.models.callable (which imports torch; this module does not)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CallableSpec:
    """Any PyTorch model, from a `module:function` (docs/model-profile.md): what the cost model needs
    of it, read on the meta device. It stands where a ModelSpec stands (a Run's model, a record's
    model_spec): the transformer-only fields read as zero, so the analytic formulas see no vocabulary,
    no attention and 6 N FLOPs per item; step time and memory come from a model profile
    (topowise.costmodel.profiled).

    blocks: parameters of each block FSDP wraps (instances of `wrap_class`), in forward order.
    tensors: every parameter tensor's element count, in registration order (DDP fills its buckets in
    the reverse: the order backward finishes the gradients).
    accepts: which of micro_batch, seq_len the function takes (the others do not shape its batch)."""

    name: str
    params: int
    blocks: tuple[int, ...] = ()
    tensors: tuple[int, ...] = ()
    wrap_class: str = ""
    accepts: tuple[str, ...] = ()
    embedding_params: int = 0  # in nn.Embedding and nn.EmbeddingBag tables: lookups, no FLOPs
    family: str = "callable"
    # the measured profile this model is predicted from (topowise.costmodel.profiled.ModelProfile);
    # not part of the shape
    model_profile: object = field(default=None, compare=False, repr=False)

    # what a ModelSpec has and a generic model does not: zero (see the class docstring); the lookup
    # tables read as an untied vocabulary x hidden 1, so that the FLOP count (flops.flops_params, 6 N)
    # leaves them out as it does a transformer's input embedding
    max_positions = context_length = 0
    num_heads = num_kv_heads = head_dim = intermediate_size = 0
    hidden_size, tied_embeddings, qkv_bias = 1, False, False

    @property
    def vocab_size(self) -> int:
        return self.embedding_params

    @property
    def source(self) -> str:
        return self.name

    @property
    def reference(self) -> str:
        return self.name

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def layer_params(self) -> float:
        """The mean block: what the per-block collectives (costmodel.collectives) send for each."""
        return sum(self.blocks) / len(self.blocks) if self.blocks else 0.0

    @property
    def root_params(self) -> int:
        return self.params - sum(self.blocks)

    def to_dict(self) -> dict:
        return {"callable": self.name, "name": self.name, "family": self.family, "params": self.params,
                "blocks": list(self.blocks), "tensors": list(self.tensors), "wrap_class": self.wrap_class,
                "accepts": list(self.accepts), "embedding_params": self.embedding_params}

    @classmethod
    def from_dict(cls, data: dict) -> CallableSpec:
        return cls(name=str(data["callable"]), params=int(data["params"]), blocks=tuple(data.get("blocks", ())),
                   tensors=tuple(data.get("tensors", ())), wrap_class=str(data.get("wrap_class", "")),
                   accepts=tuple(data.get("accepts", ())), embedding_params=int(data.get("embedding_params", 0)))
