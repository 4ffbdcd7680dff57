"""Environment: what ran where, one line per environment (machine and software) of the rows."""
import pandas as pd

from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Section, Table

COLUMNS = {"env": "env", "host": "host", "cpu_count": "CPUs", "devices_seen": "devices",
           "threads": "threads", "python": "python", "packages": "packages",
           "git_commit": "git commit", "rows": "rows", "files": "files"}


def environments(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per environment: what ran where (from the rows' env and device fields)."""
    records = []
    for label, group in frame.groupby("env", sort=True):
        env = group["env_record"].iloc[0]
        packages = env.get("packages") or {}
        records.append({
            "env": label, "host": env.get("host"), "cpu_count": env.get("cpu_count"),
            "devices_seen": distinct(f"{kind}: {name}" for kind, name
                                     in zip(group["device_type"], group["device_name"], strict=True)
                                     if isinstance(name, str)),
            "threads": distinct(group["threads_per_device"]),
            "python": env.get("python"),
            "packages": ", ".join(f"{k} {v}" for k, v in sorted(packages.items())),
            "git_commit": distinct(r.get("git_commit") for r in group["env_record"]),
            "rows": len(group), "files": distinct(group["source"])})
    return pd.DataFrame(records, columns=list(COLUMNS))


def distinct(values) -> str:
    """'a, b': the different values, '—' where there are none."""
    return ", ".join(sorted({str(v) for v in values if v is not None and v == v})) or "—"


def environment_table(data: ReportData):
    return environments(data.frame).rename(columns=COLUMNS).astype(str)


SECTION = Section(
    name="environment",
    title="Environment",
    paragraphs=[
        "What ran where, from the rows. Rows from different machines or software versions are "
        "separate environments and are never averaged together."],
    tables=(Table("environment", "What ran where", environment_table, "there are no rows"),))
