"""Run a test body in several threads released together (for the per-thread state tests)."""
import threading


def run_in_threads(target, n=8):
    """target(i) in n threads started together; the first failure re-raised."""
    errors, start = [], threading.Barrier(n)

    def run(i):
        try:
            start.wait()
            target(i)
        except BaseException as e:      # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
