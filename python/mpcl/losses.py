"""Losses: sparse categorical cross-entropy (softmax cross-entropy in f32 on
the device, as in every policy)."""


class SparseCategoricalCrossentropy:
    def __init__(self, from_logits=False):
        self.from_logits = bool(from_logits)
