"""benchmarks.peers' reports: medians of rounds and the ratios between the sides (no flags:
tests import it too)."""

import statistics


def compare(results):
    """keras_bert's rate over PyTorch's best variant of the same job: its best precision
    (job@precision) at its best thread setting (job~threads=N); with each side's rounds, the
    same ratio round by round too (`ratio_by_round`)."""
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
            if "rounds_s" in ours:
                sides["ratio_by_round"] = round_ratios(ours, peers[best]["pytorch"])


def round_ratios(ours, theirs):
    """The ratio of the two sides' rates in each round, whose two jobs ran seconds apart, so
    that a change in the machine's load between rounds moves both: median, lowest, highest."""
    ratios = [(ours["items"] / a) / (theirs["items"] / b)
              for a, b in zip(ours["rounds_s"], theirs["rounds_s"])]  # fmt: skip
    return {"median": statistics.median(ratios), "lowest": min(ratios), "highest": max(ratios)}


def summary(reports):
    """Medians over rounds of one side's reports for one job."""
    seconds = statistics.median(r["seconds"] for r in reports)
    items = reports[0]["items"]
    result = {"median_s": seconds, "per_s": items / seconds, "items": items,
              "unit": reports[0]["unit"], "rounds_s": [r["seconds"] for r in reports]}  # fmt: skip
    latencies = sorted(x for r in reports for x in r.get("latencies", []))
    if latencies:
        result["latency_ms_p50"] = 1000 * latencies[len(latencies) // 2]
        result["latency_ms_p99"] = 1000 * latencies[min(len(latencies) - 1,
                                                        int(0.99 * len(latencies)))]  # fmt: skip
    return result
