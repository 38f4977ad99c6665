"""One request's rewrite, as the engine hands it to the edge: the pipeline's result, the
encoding it was counted with, the recall markers it made and its held store writes."""

from __future__ import annotations

from dataclasses import dataclass

from context_engine.proxy.engine.pending_writes import PendingWrites
from context_engine.proxy.engine.pipeline import PipelineResult
from context_engine.proxy.engine.recall_state import RecallState


@dataclass
class Rewrite:
    result: PipelineResult
    encoding: str
    encoding_fallback: bool
    recall: RecallState | None = None  # markers made; whether context_recall is offered
    pending: PendingWrites | None = None  # its store writes, when held for ``Engine.settle``
