"""Run a test's `work(i)` in n threads at once and wait for all of them."""
import threading


def run_threads(work, n):
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
