"""The open-loop client's arrival times, in one place: `client.py` sends at them and
`bound.py` bounds a run on them, so both read the same schedule from a seed."""
import random


def arrival_times(rate, seed, duration, max_requests):
    """Poisson arrivals at `rate` per second from `seed`: the offsets (s) before
    `duration`, at most `max_requests` of them."""
    rng = random.Random(seed)
    times = []
    t = rng.expovariate(rate)
    while t < duration and len(times) < max_requests:
        times.append(t)
        t += rng.expovariate(rate)
    return times
