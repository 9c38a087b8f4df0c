"""run_all's supervision: the restart back-off of a child that keeps dying (a killed child: tests/acceptance/test_faults.py)."""

from runs.management.commands.run_all import MAX_BACKOFF, STEADY_SECONDS, Child, next_backoff


def test_the_back_off_doubles_from_one_second_to_a_minute_while_a_child_keeps_dying():
    waits, backoff = [], 0.5
    for _ in range(9):
        backoff = next_backoff(backoff, uptime=0.2)
        waits.append(backoff)
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert MAX_BACKOFF == 60


def test_the_back_off_starts_again_at_one_second_once_a_child_stayed_up():
    assert next_backoff(60, uptime=STEADY_SECONDS) == 1
    assert next_backoff(60, uptime=STEADY_SECONDS - 1) == 60


def test_a_dead_child_is_restarted_only_once_its_back_off_passed():
    said = []
    child = Child("crasher", ["false"], said.append)
    child.process.wait()
    child.watch(now=child.started + 0.1)
    first = child.process
    assert said == ["crasher exited with code 1; restarting in 1 s"]
    child.watch(now=child.started + 0.5)
    assert child.process is first, "still backing off"
    child.watch(now=child.started + 1.2)
    assert child.process is not first and said[-1] == "restarting crasher"
    child.process.wait()
    child.watch(now=child.started + 0.1)
    assert said[-1] == "crasher exited with code 1; restarting in 2 s"
