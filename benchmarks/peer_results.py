"""benchmarks.peers' reports: medians of rounds and the ratios between the sides (no flags:
tests import it too)."""

import statistics


def compare(results):
    """keras_bert's rate over PyTorch's best variant of the same job: its best precision
    (job@precision) at its best thread setting (job~threads=N)."""
    def plain(name):  # without its variant
        return name.split("~")[0]

    for job, sides in results.items():
        ours, base = sides.get("keras_bert"), plain(job)
        peers = {name: r for name, r in results.items() if "pytorch" in r
                 and (plain(name) == base or plain(name).startswith(base + "@"))}  # fmt: skip
        if ours and peers:
            best = max(peers, key=lambda name: peers[name]["pytorch"]["per_s"])
            sides["ratio"] = ours["per_s"] / peers[best]["pytorch"]["per_s"]
            sides["ratio_against"] = best


def summary(reports):
    """Medians over rounds of one side's reports for one job."""
    seconds = statistics.median(r["seconds"] for r in reports)
    result = {"median_s": seconds, "per_s": reports[0]["items"] / seconds,
              "unit": reports[0]["unit"], "rounds_s": [r["seconds"] for r in reports]}  # fmt: skip
    latencies = sorted(x for r in reports for x in r.get("latencies", []))
    if latencies:
        result["latency_ms_p50"] = 1000 * latencies[len(latencies) // 2]
        result["latency_ms_p99"] = 1000 * latencies[min(len(latencies) - 1,
                                                        int(0.99 * len(latencies)))]  # fmt: skip
    return result
