"""roadgate's inference engine: `from engine import LLM, SamplingParams`.

Knows nothing of SQL, Parquet or Airflow.
"""
from engine.llm import LLM, PromptError
from engine.model_source import ModelSourceError
from engine.outputs import ModelOutputError, RequestOutput
from engine.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "PromptError", "ModelSourceError",
           "ModelOutputError"]
