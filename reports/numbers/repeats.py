"""What a cell keeps of its repeats (reports.numbers.analysis.cell_table): each epoch's times over
the usable runs and the rate of their mean, the means of what every run recorded (memory, the
epochs' loss and accuracy, the step attribution's last epoch), what every ok run trained on,
and its runs' statuses in words."""
import math

import numpy as np
import pandas as pd

from xbench.common.measuring.attribution import mean_parts
from xbench.common.measuring.basis import communication
from xbench.reports.numbers.stats import summarize


def repeated_values(ok) -> dict:
    """What a cell keeps of its usable repeats besides its epochs' rates."""
    return {"epoch2_input_seconds": summarize([e[1] for e in ok["epoch_input_seconds"]
                                               if len(e) > 1 and e[1] is not None])["mean"],
            "memory_per_device": mean_per_device(ok["memory_per_device"]),
            "model_state_per_device": mean_per_device(ok["model_state_per_device"]),
            "epoch_means": epoch_means(ok["epoch_list"]),
            "batchnorm_difference": ok["batchnorm_difference"].max(),
            "test_accuracy_values": ok["test_accuracy"].dropna().tolist(),
            "attributions": [{**last_epoch_attribution(a), "broken": broken}
                             for a, broken in zip(ok["attribution"], ok["broken"]) if a],
            "epoch2_runs": epoch2_runs(ok)}


def epoch2_runs(ok) -> list[dict]:
    """Each usable run's repeat, epoch-2 seconds, what took its cores then (its epoch 2's
    contention record, None before it was recorded) and its grid's contention limit: where a
    ratio is SUSPECT, the disturbed run of its baseline is named from these."""
    return [{"repeat": int(repeat), "seconds": seconds,
             "contention": epochs[1].get("contention") if len(epochs) > 1 else None,
             "limit": limit}
            for repeat, seconds, epochs, limit in zip(
                ok["repeat"], ok["epoch2_seconds"], ok["epoch_list"], ok["contention_limit"],
                strict=True) if seconds == seconds]


def evidence_of(ran) -> dict:
    """What was trained, from every ok run: it does not depend on what else ran."""
    return {"global_digests": sorted({d for d in ran["global_digests"] if d}),
            "sampler_digests": sorted({d for d in ran["sampler_digests"] if d}),
            "shard_overlap": int(ran["shard_overlap"].max()) if len(ran) else 0,
            "replicas_agree": bool(ran["replicas_agree"].all())}


def epoch_rate(ok, epoch: int, samples) -> dict:
    """An epoch's times over the usable repeats, its mean and interval, and the rate of both."""
    seconds = ok[f"epoch{epoch}_seconds"].dropna().tolist()
    time = summarize(seconds)
    return {f"epoch{epoch}_seconds_values": seconds, f"epoch{epoch}_seconds": time["mean"],
            f"epoch{epoch}_seconds_ci": time["ci"], f"epoch{epoch}_rate": samples / time["mean"],
            f"epoch{epoch}_rate_low": samples / (time["mean"] + time["ci"]),
            f"epoch{epoch}_rate_high": samples / (time["mean"] - time["ci"])
            if time["ci"] < time["mean"] else math.inf}


def statuses_text(group):
    """'3 ok (1 contended), 1 timeout'."""
    parts = []
    for status, count in group["status"].value_counts().items():
        contended = int((group["status"].eq(status) & group["contended"]).sum())
        parts.append(f"{count} {status}" + (f" ({contended} contended)" if contended else ""))
    return ", ".join(parts)


def mean_per_device(lists):
    """Bytes per device, averaged over repeats (lists of the most common length)."""
    lists = [m for m in lists if isinstance(m, list) and m]
    if not lists:
        return None
    length = pd.Series([len(m) for m in lists]).mode()[0]
    return np.mean([m for m in lists if len(m) == length], axis=0).tolist()


def epoch_means(epoch_lists):
    """{epoch: (mean loss, mean training accuracy)} over the repeats, epochs in order."""
    by_epoch = {}
    for epochs in epoch_lists:
        for e in epochs:
            if isinstance(e.get("epoch"), int):
                by_epoch.setdefault(e["epoch"], []).append((e.get("loss"), e.get("accuracy")))
    return {epoch: (summarize([v[0] for v in values])["mean"],
                    summarize([v[1] for v in values])["mean"])
            for epoch, values in sorted(by_epoch.items())}


def last_epoch_attribution(record: dict) -> dict:
    """One run's step attribution (common.measuring.attribution), its last epoch: each part's
    seconds (the mean over the ranks), the steps, whether every epoch and rank added up, the
    time its collectives moved data per step (median over steps, on the rank that saw the most
    of it), the share of their time that overlapped compute, the bytes they reduced where
    counted, each rank's timeline, the slowest rank and how each part is known."""
    epoch = record["epochs"][-1]
    ranks = epoch["ranks"]
    busy = sum(r["collective"]["busy_seconds"] for r in ranks)
    overlapped = [r["collective"].get("overlapped_seconds") for r in ranks]
    return {"parts": mean_parts(ranks), "steps": ranks[0]["steps"],
            "residual": float(np.mean([r["residual_seconds"] for r in ranks])),
            "adds_up": all(r["adds_up"] for e in record["epochs"] for r in e["ranks"]),
            "moving": max(r["collective"]["moving_median"] for r in ranks),
            # the share of the ranks' communication that overlapped their compute (None: no
            # collective, or a row from before it was measured)
            "overlap": (sum(overlapped) / busy if busy > 0 and None not in overlapped
                        else None),
            "bytes": ranks[0]["collective"]["bytes_per_step"],
            # collectives a step, counted on the steps that carry them (None: none counted, or
            # a row from before schema 16)
            "collectives": ranks[0]["collective"].get("collectives_per_step"),
            # the why's numbers on one basis (None: no collective, or a row before schema 18)
            "communication": communication(ranks, record.get("alone")),
            # each rank's step as a timeline (None: a row from before schema 15 recorded it)
            "timelines": [r.get("timeline") for r in ranks],
            "slowest_rank": epoch["slowest_rank"], "how": record["how"]}
