"""BERT pre-training data: masked-LM + next-sentence instances, and sentence pairs from text.

Instances are built as the original recipe does: segments are filled with consecutive sentences
up to the target length (shorter with probability `short_seq_prob`), B is the real next segment
half of the time and a segment of another document otherwise, and `masked_lm_prob` of the
tokens (at most `max_predictions_per_seq`, never [CLS] or [SEP]) are chosen for prediction: 80%
become [MASK], 10% a random token, 10% stay. With whole-word masking, a word's pieces are
chosen together.

Two deliberate differences keep the next-sentence classes at 50/50 (the original skews towards
random pairs, about 60/40 on short documents): a one-sentence chunk takes the following sentence
as its real B rather than always becoming a random pair (a document's lone last sentence,
which has no real B, makes no instance); and the sentences a random pair leaves unused are not
put back to start another instance.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass
class Instance:
    """One pre-training example, unpadded. Ids are ints; lengths vary."""

    input_ids: list
    segment_ids: list
    is_random_next: bool
    masked_lm_positions: list
    masked_lm_ids: list


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    cls: int
    sep: int
    mask: int
    vocab_size: int
    # Ids a random replacement may take: the vocabulary minus [PAD], [CLS], [SEP], [MASK] etc.
    replacement_ids: tuple


def mask_tokens(ids, starts_word, special, rng, masked_lm_prob, max_predictions, whole_word):
    """Chooses and corrupts the positions to predict.

    Args:
      ids: token ids of a packed sequence, [CLS] and [SEP] included.
      starts_word: for each token, whether it begins a word (False for "##" pieces).
      special: SpecialIds. rng: a numpy Generator.
    Returns (corrupted ids, sorted positions, original ids at those positions).
    """
    candidates = []  # groups of positions that are masked together
    for i, token in enumerate(ids):
        if token in (special.cls, special.sep):
            continue
        if whole_word and candidates and not starts_word[i] and candidates[-1][-1] == i - 1:
            candidates[-1].append(i)
        else:
            candidates.append([i])
    rng.shuffle(candidates)
    budget = min(max_predictions, max(1, round(len(ids) * masked_lm_prob)))
    chosen = []
    for group in candidates:
        if len(chosen) + len(group) > budget:
            continue
        chosen.extend(group)
        if len(chosen) >= budget:
            break
    chosen.sort()
    corrupted = list(ids)
    for position in chosen:
        roll = rng.random()
        if roll < 0.8:
            corrupted[position] = special.mask
        elif roll < 0.9:
            # Indexing draws what rng.choice(ids) draws (the same stream), without converting
            # the 30,000-id tuple to an array each time.
            replacements = special.replacement_ids
            corrupted[position] = int(replacements[rng.integers(len(replacements))])
        # else: keep the original token
    return corrupted, chosen, [ids[p] for p in chosen]


def _truncate_pair(a, b, max_tokens, rng):
    """Drops tokens from the longer segment, from its front or back at random (as the original)."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def instances_from_document(documents, index, special, rng, max_seq_length=128,
                            short_seq_prob=0.1, masked_lm_prob=0.15, max_predictions=20,
                            whole_word=False):  # fmt: skip
    """Builds the instances of documents[index].

    `documents` is a list of documents; a document is a list of sentences; a sentence is a list
    of (token id, starts_word) pairs.
    """
    document = documents[index]
    max_tokens = max_seq_length - 3
    target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            if len(chunk) == 1 and i + 1 == len(document):
                chunk = []  # a lone last sentence has no real B; a random B alone would skew
            if chunk:
                random_next = len(documents) > 1 and rng.random() < 0.5
                if len(chunk) == 1 and not random_next:
                    # The original makes every one-sentence chunk random, which skews the 50/50
                    # balance; here the following sentence serves as the real B.
                    i += 1
                    chunk.append(document[i])
                split = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                a = [t for sentence in chunk[:split] for t in sentence]
                if random_next:
                    other = index
                    while other == index:
                        other = int(rng.integers(len(documents)))
                    other_doc = documents[other]
                    start = int(rng.integers(len(other_doc)))
                    b = []
                    for sentence in other_doc[start:]:
                        b.extend(sentence)
                        if len(b) >= target - len(a):
                            break
                else:
                    b = [t for sentence in chunk[split:] for t in sentence]
                if a and b:
                    _truncate_pair(a, b, max_tokens, rng)
                    instances.append(_pack(a, b, random_next, special, rng, masked_lm_prob,
                                           max_predictions, whole_word))  # fmt: skip
            chunk, length = [], 0
        i += 1
    return instances


def _pack(a, b, random_next, special, rng, masked_lm_prob, max_predictions, whole_word):
    ids = [special.cls] + [t for t, _ in a] + [special.sep] + [t for t, _ in b] + [special.sep]
    starts = [True] + [s for _, s in a] + [True] + [s for _, s in b] + [True]
    segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    corrupted, positions, labels = mask_tokens(ids, starts, special, rng, masked_lm_prob,
                                               max_predictions, whole_word)  # fmt: skip
    return Instance(corrupted, segments, random_next, positions, labels)


def replacement_ids(vocabulary):
    """Ids a random replacement may take: everything but bracketed special tokens."""
    return tuple(i for i, t in enumerate(vocabulary) if not (t.startswith("[") and t.endswith("]")))


def special_ids(tokenizer):
    if "[MASK]" not in tokenizer.vocabulary:
        raise ValueError("the vocabulary has no [MASK] token (needed for masked-LM pre-training)")
    return SpecialIds(tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id,
                      len(tokenizer.vocabulary), replacement_ids(tokenizer.vocabulary))  # fmt: skip


def sentence_pairs(documents, seed=None):
    """Next-sentence pairs from raw text, for `BertPretrainer.fit`: each sentence and the one
    after it in its document, where half the time (at random) the second is replaced by a
    sentence of another document.

    Args:
      documents: a list of documents, each a list of sentences (str).
    Returns (first sentences, second sentences, labels): lists; label 1 means "random".
    """
    for d, document in enumerate(documents):
        if isinstance(document, (str, bytes)) or not hasattr(document, "__iter__"):
            # a string would be read as a document of one-character sentences
            raise ValueError(f"documents[{d}] is a {type(document).__name__}: give each "
                             "document as a list of sentences (strings)")  # fmt: skip
        for i, sentence in enumerate(document):
            if not isinstance(sentence, str):
                raise ValueError(f"documents[{d}][{i}] is {sentence!r}: sentences must be "
                                 "strings")  # fmt: skip
    documents = [[s for s in document if s.strip()] for document in documents]
    if sum(1 for document in documents if document) < 2:
        raise ValueError("sentence_pairs needs at least two documents with text (the random "
                         "second sentences come from another document)")  # fmt: skip
    if not any(len(document) >= 2 for document in documents):
        raise ValueError("sentence_pairs needs a document of at least two sentences")
    rng = np.random.default_rng(seed)
    firsts, seconds, labels = [], [], []
    for index, document in enumerate(documents):
        for i in range(len(document) - 1):
            random_next = rng.random() < 0.5
            second = document[i + 1]
            if random_next:
                other = index
                while other == index or not documents[other]:
                    other = int(rng.integers(len(documents)))
                second = documents[other][int(rng.integers(len(documents[other])))]
            firsts.append(document[i])
            seconds.append(second)
            labels.append(int(random_next))
    return firsts, seconds, labels
