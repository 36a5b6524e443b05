"""Whether a kernel split over the thread pool runs on the workers or on the calling thread alone,
learnt from its own run times (threads.py runs it; regions.py keeps one per split kernel)."""


class Judge:
    """Whether one kernel runs faster on the workers or on the calling thread alone, learnt from its
    own run times: a moving average of each mode's seconds, the faster mode used, the other one tried
    now and then (after EXPLORE runs, twice as many after each try that confirms the choice, up to
    MAX_EXPLORE; a try that wins switches). So a busy machine, where workers wait for a core or
    fight for memory bandwidth, falls back to one thread, and a quiet one gets all threads back.
    The first run teaches nothing: it pays once for what later runs find ready (the pages of fresh
    state and buffers faulted in, cold caches, sleeping workers). Learnt from, it often lost to the
    one-thread try that followed, so the next EXPLORE runs ran on one thread: a compiled momentum SGD
    step of a (4M,) float32 parameter (its zeroed momentum buffer faulted in by the first run) ran
    its first run on the workers in 2.7-3.3 ms (once 15) against 2.0-2.6 for later ones, and the
    try won in 3 of 5 fresh processes (a loaded machine); the survey's --quick median of the
    program was then the one-thread time. The second run, the first one learnt from, can be slow
    too, and a try that beats a mode timed only once therefore has that mode tried again at the
    next run: W2's softmax (4 chunks, a quiet machine, the bench's sequence of calls) timed its
    second run on the workers at 9.6-12 ms against 1.2 ms later, lost to a one-thread try of 4.5 ms
    and ran its next 8 runs, all of the bench's --quick samples, on one thread (2.1-2.3 ms): the
    static or the dynamic=True compile of one program, whichever drew that second run, 1.5-2x the
    other."""

    EXPLORE, MAX_EXPLORE = 8, 1024

    def __init__(self):
        self.mean = {True: None, False: None}       # seconds per run, on the workers / on one thread
        self.runs = {True: 0, False: 0}             # runs learnt from, per mode
        self.best, self.trying, self.warm = True, False, False
        self.interval, self.countdown = self.EXPLORE, 3     # the first run warms up, the third tries one thread

    def parallel(self):
        """Whether to use the workers for this run."""
        self.countdown -= 1
        self.trying = self.countdown <= 0
        return self.best != self.trying

    def record(self, parallel, seconds):
        """Learn from one run that took `seconds` (on the workers if `parallel`); not from the first."""
        if not self.warm:
            self.warm = True
            return
        old, tried = self.mean[parallel], parallel != self.best
        # a try's time replaces the old one (taken maybe under other load); the chosen mode's averages
        self.mean[parallel] = seconds if old is None or tried else 0.75 * old + 0.25 * seconds
        self.runs[parallel] += 1
        other = self.mean[not parallel]
        if tried:
            if other is not None and self.mean[parallel] < other:
                self.best, self.interval = parallel, self.EXPLORE
            else:
                self.interval = min(2 * self.interval, self.MAX_EXPLORE)
            # a won try against a mode timed once (maybe a cold run): that mode again at the next run
            self.countdown = 1 if self.best == parallel and self.runs[not parallel] < 2 else self.interval
        elif other is not None and self.mean[parallel] > other:     # the chosen mode got slower
            self.best, self.interval, self.countdown = not parallel, self.EXPLORE, self.EXPLORE
