"""The original run_squad.py's window loop and max-context rule, written out in Python, for the
tests that check the graph's windows against them (SQuAD passages, long texts)."""


def reference_windows(num_tokens, room, stride):
    """The original run_squad.py loop over doc spans: (start, length) pairs."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, room)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, stride)
    return spans or [(0, 0)]


def reference_max_context(spans, index, position):
    """The original _check_is_max_context."""
    best_score, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, i
    return best_index == index
