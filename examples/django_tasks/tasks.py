"""The sample project's tasks: plain Django `@task` functions, nothing Duetime-specific."""

from django.tasks import task


@task
def total(prices, vat=0.2):
    """Sum an order's prices with VAT, rounded to cents."""
    return round(sum(prices) * (1 + vat), 2)


@task(queue_name="emails", priority=10, takes_context=True)
async def send_receipt(context, order, amount):
    """An async task on its own queue; the context says which attempt this is."""
    return {"order": order, "amount": amount, "attempt": context.attempt}
