"""Whether the model knows more than a constant: its errors beside those of trivial predictors,
and its skill, 1 - its error / the best trivial predictor's error (0: no better than the best of
them; 1: no error; below 0: worse than a predictor that knows nothing of the step).

Published records (reports.step_model.published): the trivial predictors of an efficiency are
the published median of the other records (leave one out), a constant CONSTANT, the model's own
bounds (none of the collectives hidden, all hidden) and their midpoint; each is scored over all
records and over the discriminating ones, whose bounds lie at least DISCRIMINATING apart: only
there can a record tell overlap models apart. Errors are in points of efficiency and in the
step time (the N-device step each predictor implies against the published one).

Measured cells (reports.step_model.predict's check): the trivial predictors of an N-device
cell's epoch are perfect scaling (its compute as the 1-device cell's, divided, and nothing
else), the 1-device cell's own step (nothing gained), and the median ratio of measured to
perfect-scaling epochs over the other cells (leave one out).
"""
from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd

DISCRIMINATING = 0.05  # bounds this far apart (a share of efficiency) tell overlap models apart
CONSTANT = 0.95
MODEL = "xbench's prediction"


def leave_one_out_median(values: pd.Series) -> pd.Series:
    """Each value's predictor: the median of all the others (NaN for a lone value)."""
    found = [statistics.median(values.drop(index)) if len(values) > 1 else math.nan
             for index in values.index]
    return pd.Series(found, index=values.index, dtype=float)


def efficiency_predictors(record: pd.DataFrame) -> dict[str, pd.Series]:
    """The model's predicted efficiency and each trivial predictor's, per record."""
    return {MODEL: record["predicted"],
            "the published median, leave-one-out": leave_one_out_median(record["published"]),
            f"a constant {CONSTANT:g}": pd.Series(CONSTANT, index=record.index),
            "the none-hidden bound": record["no_overlap"],
            "the all-hidden bound": record["full_overlap"],
            "the midpoint of the bounds": (record["no_overlap"] + record["full_overlap"]) / 2}


def discriminating(record: pd.DataFrame) -> pd.Series:
    """The records whose bounds lie at least DISCRIMINATING apart."""
    return (record["full_overlap"] - record["no_overlap"]) >= DISCRIMINATING - 1e-12


def errors(guess: pd.Series, published: pd.Series) -> dict[str, float]:
    """Median and mean absolute error in points of efficiency, and of the step time the guess
    implies (a step on N devices is the baseline's over the efficiency: guessed / published
    step - 1 = published / guessed efficiency - 1), as a share."""
    points = ((guess - published).abs() * 100).dropna()
    step = (published / guess - 1).abs().dropna()
    def middle(values, how):
        return float(how(values)) if len(values) else math.nan
    return {"median_points": middle(points, np.median), "mean_points": middle(points, np.mean),
            "median_step": middle(step, np.median), "mean_step": middle(step, np.mean)}


def scored(predictors: dict[str, pd.Series], truth: pd.Series, score) -> dict:
    """{"predictors": each one's errors (`score(guess, truth)`), "best_trivial": the trivial
    predictor of the lowest first error, "skill": 1 - the model's / the best's, per error}."""
    found = {name: score(guess, truth) for name, guess in predictors.items()}
    trivial = {name: value for name, value in found.items() if name != MODEL}
    first = next(iter(found[MODEL]))
    usable = {n: v for n, v in trivial.items() if math.isfinite(v[first])}
    if not usable:
        return {"predictors": found, "best_trivial": None, "skill": {}}
    best = min(usable, key=lambda name: usable[name][first])
    skill = {key: 1 - found[MODEL][key] / min(v[key] for v in usable.values())
             if min(v[key] for v in usable.values()) > 0 else math.nan
             for key in found[MODEL]}
    return {"predictors": found, "best_trivial": best, "skill": skill}


def published_scores(record: pd.DataFrame) -> dict:
    """Over all records and over the discriminating ones: how many, each predictor's errors,
    the best trivial predictor and the model's skill, and the share the bounds bracket."""
    predictors = efficiency_predictors(record)
    found = {}
    for name, chosen in (("all", pd.Series(True, index=record.index)),
                         ("discriminating", discriminating(record))):
        inside = ((record["no_overlap"] <= record["published"])
                  & (record["published"] <= record["full_overlap"]))[chosen]
        found[name] = {"records": int(chosen.sum()),
                       "bracketed_share": float(inside.mean()) if len(inside) else math.nan,
                       **scored({k: v[chosen] for k, v in predictors.items()},
                                record["published"][chosen], errors)}
    return found


def held_out_scores(check: pd.DataFrame) -> dict:
    """The measured cells' held-out epoch errors (predicted / measured - 1, absolute: median and
    mean) beside the trivial predictors' (the check's `perfect`, `one_device` and `constant`
    columns: reports.step_model.predict), the best of them and the model's skill."""
    measured = check["measured_seconds"]
    predictors = {MODEL: check["epoch_seconds"], "perfect scaling": check["perfect_seconds"],
                  "the 1-device step": check["one_device_seconds"],
                  "the other cells' median ratio to perfect scaling": check["constant_seconds"]}
    def score(guess, truth):
        share = (guess / truth - 1).abs().dropna()
        return {"median": float(np.median(share)) if len(share) else math.nan,
                "mean": float(np.mean(share)) if len(share) else math.nan}
    return {"cells": len(check), **scored(predictors, measured, score)}


def skill_text(scores: dict, error: str = "median") -> str:
    """'skill 0.31 against the best trivial predictor (the midpoint of the bounds)', or why
    there is none."""
    skill = scores["skill"].get(error, math.nan)
    if scores["best_trivial"] is None or not math.isfinite(skill):
        return "no skill: no trivial predictor to score against"
    return f"skill {skill:+.2f} against the best trivial predictor ({scores['best_trivial']})"
