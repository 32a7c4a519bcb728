"""Small statistics helpers for the reading-time report."""


def word_count(text):
    """Number of whitespace-separated words in text."""
    return len(text.split())


def mean(values):
    """Arithmetic mean; raises ValueError for no values."""
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    """Middle value of values; the mean of the two middle ones for an even count."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid]
