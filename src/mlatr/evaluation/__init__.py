"""Evaluation: retrieval and consistency metrics, zero-shot classification, reports and plots.

Entry points: :func:`evaluate_embeddings`, :func:`evaluate_scores`, :func:`zero_shot`,
:func:`zero_shot_prompts`; reports in :mod:`mlatr.evaluation.report` (tables) and
:mod:`mlatr.evaluation.plots` (figures, matplotlib imported lazily).
"""

from mlatr.evaluation.evaluate import (
    DEFAULT_MEMORY_BUDGET_MB,
    Evaluation,
    evaluate_embeddings,
    evaluate_embeddings_with_ranks,
    evaluate_scores,
    evaluate_scores_with_ranks,
)
from mlatr.evaluation.plots import plot_rank_spread, plot_recall_by_language
from mlatr.evaluation.report import format_consistency, format_report, format_table1, report_markdown, write_report
from mlatr.evaluation.retrieval import METRIC_KEYS, Ranks
from mlatr.evaluation.zero_shot import PROMPT_TEMPLATES, zero_shot, zero_shot_from_scores, zero_shot_prompts

__all__ = [
    "DEFAULT_MEMORY_BUDGET_MB",
    "Evaluation",
    "METRIC_KEYS",
    "PROMPT_TEMPLATES",
    "Ranks",
    "evaluate_embeddings",
    "evaluate_embeddings_with_ranks",
    "evaluate_scores",
    "evaluate_scores_with_ranks",
    "format_consistency",
    "format_report",
    "format_table1",
    "plot_rank_spread",
    "plot_recall_by_language",
    "report_markdown",
    "write_report",
    "zero_shot",
    "zero_shot_from_scores",
    "zero_shot_prompts",
]
