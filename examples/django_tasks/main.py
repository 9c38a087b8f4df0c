"""Enqueue the sample tasks with `.enqueue()` and wait for them with `get_result()` and `refresh()`.

    DJANGO_SETTINGS_MODULE=examples.django_tasks.settings python manage.py run_worker --queues default,emails &
    DJANGO_SETTINGS_MODULE=examples.django_tasks.settings python -m examples.django_tasks.main

Prints each result; exits non-zero if a task failed or did not finish in time.
"""

import sys
import time

import django

WAIT_SECONDS = 60


def main():
    django.setup()
    from examples.django_tasks.tasks import send_receipt, total
    from jobs.models import Tenant

    # Once, by an operator: the tenant, allowed to run this project's task modules.
    Tenant.objects.get_or_create(name="shop", defaults={"task_module_prefixes": "examples.django_tasks"})

    enqueued = total.enqueue([10.0, 5.5], vat=0.2)
    result = total.get_result(enqueued.id)  # anywhere else: another request, another process
    amount = wait(result).return_value
    receipt = wait(send_receipt.enqueue(order=42, amount=amount))
    print(f"total: {amount} (run {result.id}, {result.attempts} attempt)")
    print(f"receipt: {receipt.return_value}")


def wait(result):
    deadline = time.monotonic() + WAIT_SECONDS
    while not result.is_finished and time.monotonic() < deadline:
        time.sleep(0.1)
        result.refresh()
    if result.status != "SUCCESSFUL":
        errors = "\n".join(error.traceback for error in result.errors)
        sys.exit(f"task result {result.id}: {result.status}\n{errors}")
    return result


if __name__ == "__main__":
    main()
