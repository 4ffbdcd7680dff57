"""`xbench probe`'s record as text: its matmul and all-reduce figures as two small tables."""
from xbench.common.backends.protocol import ALL_REDUCE


def probe_text(record: dict) -> str:
    """The probe's figures as two small tables, then what it could not measure and why."""
    lines = [f"{'matmul':<11} {'device':<32} {'precision':<10} {'threads':>7} "
             f"{'GFLOP/s':>9}  (slowest-fastest repeat)"]
    for m in record["matmul"]:
        lines.append(f"{m['framework']:<11} {m['device_name'][:32]:<32} {m['precision']:<10} "
                     f"{m['threads'] or '-':>7} {m['gflops']:>9,.1f}  "
                     f"({m['gflops_low']:,.1f}-{m['gflops_high']:,.1f})")
    lines += ["", f"{ALL_REDUCE:<16} {'nodes':>5} {'ranks':>5} {'MiB':>6} {'ms':>8} "
                  f"{'algbw GB/s':>10} {'busbw GB/s':>10}  (slowest-fastest repeat)"]
    for a in record["all_reduce"]:
        lines.append(f"{a['library']:<16} {a['nodes']:>5} {a['world_size']:>5} "
                     f"{a['bytes'] / 2**20:>6.2f} {a['seconds'] * 1e3:>8.2f} "
                     f"{a['algbw'] / 1e9:>10.3f} {a['busbw'] / 1e9:>10.3f}  "
                     f"({a['busbw_low'] / 1e9:.3f}-{a['busbw_high'] / 1e9:.3f})")
    lines += [f"not measured: {n['what']}: {n['why'].splitlines()[0]}"
              for n in record["not_measured"]]
    return "\n".join(lines)
