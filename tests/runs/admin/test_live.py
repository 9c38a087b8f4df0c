"""Live updates: the web process notices changes made by other processes and tells only the right tenants."""

import asyncio
import socket

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client, override_settings

from jobs import members
from runs import rollups
from runs.admin import live
from tests.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)


def cookie_for(client, user):
    client.force_login(user)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), (b"origin", b"http://127.0.0.1")]


async def db(fn):
    """Run ORM code in the thread the consumer uses, so the test leaves one connection to close."""
    return await database_sync_to_async(fn)()


async def closed(communicator):
    await communicator.disconnect()
    await database_sync_to_async(connections.close_all)()


def poller_ready():
    """The poller serves this test's event loop and has taken its first reading (its baseline)."""
    return live.poller.loop is asyncio.get_running_loop() and live.poller.last is not None


async def connect(headers):
    from scheduler_project.asgi import application

    communicator = WebsocketCommunicator(application, "/ws/live/", headers=headers)
    connected, code = await communicator.connect()
    return communicator, connected, code


def test_it_moves_the_watermark_when_another_process_writes(acme, make_job, make_run):
    before = live.read_watermark()
    job = make_job(acme, "a.job")
    make_run(job)
    after = live.read_watermark()
    assert after.run > before.run
    assert live.changed_tenants(before, after).keys() == {acme.pk}


def test_it_names_the_tenants_of_new_attempts_claims_and_dead_letters(
    acme, globex, make_job, make_run, make_dead, clock
):
    run = make_run(make_job(acme, "a.job"))
    mark = live.read_watermark()
    make_dead(make_job(globex, "g.job"), clock.now)
    assert live.changed_tenants(mark, live.read_watermark()).keys() == {globex.pk}
    assert run.tenant_id == acme.pk


def test_it_announces_a_tenant_again_when_its_attempts_reach_the_dashboard_counts(
    acme, globex, make_job, make_run, make_attempt, clock
):
    """The overview counts finished runs from the rollups, folded a little after each attempt:
    a page told only of the attempt would re-read too early and show a count one change behind."""
    rollups.tick(clock.now)  # the cursor exists before the attempt
    run = make_run(make_job(acme, "a.job"), due_at=clock.ago(minutes=5))
    make_attempt(run)
    attempt_written = live.read_watermark()

    rollups.tick(clock.now)

    folded = live.read_watermark()
    assert folded.folded > attempt_written.folded
    assert live.changed_tenants(attempt_written, folded).keys() == {acme.pk}


def test_it_refuses_anonymous_and_tenantless_connections(db, django_user_model):
    async def story():
        communicator, connected, code = await connect([(b"origin", b"http://127.0.0.1")])
        assert not connected and code == 4401
        await database_sync_to_async(connections.close_all)()

    asyncio.run(story())


def test_it_tells_alice_about_acme_and_never_about_globex(client, alice, acme, globex, make_job, make_run, clock):
    headers = cookie_for(client, alice)
    ours, theirs = make_job(acme, "a.job"), make_job(globex, "g.job")

    async def story():
        communicator, connected, _ = await connect(headers)
        assert connected
        await wait_until_async(poller_ready, message="the poller's own first reading")
        await live.poller.poll_once(get_channel_layer())  # the baseline
        await db(lambda: make_run(theirs))
        await live.poller.poll_once(get_channel_layer())
        assert await communicator.receive_nothing(timeout=0.3)
        await db(lambda: make_run(ours, due_at=clock.ahead(minutes=1)))
        await live.poller.poll_once(get_channel_layer())
        message = await communicator.receive_json_from(timeout=30)
        assert message["type"] == "changed" and message["tenants"] == [acme.pk]
        await closed(communicator)

    asyncio.run(story())


def test_it_polls_by_itself_while_a_page_listens(client, carol, acme, make_job, make_run):
    headers = cookie_for(client, carol)
    job = make_job(acme, "a.job")

    async def story():
        with override_settings(DUETIME_LIVE_POLL_SECONDS=0.1):
            communicator, connected, _ = await connect(headers)
            assert connected
            await wait_until_async(poller_ready, message="the poller's baseline")
            await db(lambda: make_run(job))
            message = await communicator.receive_json_from(timeout=30)
            assert acme.pk in message["tenants"]  # Carol, a superuser, hears every tenant
            await closed(communicator)

    asyncio.run(story())


def redis_up():
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.5).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_it_works_over_the_redis_channel_layer(client, alice, acme, make_job, make_run):
    headers = cookie_for(client, alice)
    job = make_job(acme, "a.job")
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:6379/0"], "prefix": "duetime-test"},
        }
    }

    async def story():
        from channels.layers import channel_layers

        with override_settings(CHANNEL_LAYERS=layers):
            channel_layers.backends.clear()
            communicator, connected, _ = await connect(headers)
            assert connected
            layer = get_channel_layer()
            await live.poller.poll_once(layer)
            await db(lambda: make_run(job))
            await live.poller.poll_once(layer)
            message = await communicator.receive_json_from(timeout=3)
            assert message["tenants"] == [acme.pk]
            await closed(communicator)
        channel_layers.backends.clear()

    asyncio.run(story())


def test_it_gives_each_tenant_only_the_watermark_of_its_own_rows(acme, globex, make_job, make_run, clock):
    before = live.read_watermark()
    ours = make_run(make_job(acme, "a.job"), due_at=clock.ahead(minutes=1))
    busy = make_job(globex, "g.job")
    theirs = [make_run(busy, due_at=clock.ahead(minutes=m)) for m in (1, 2, 3)]

    marks = live.changed_tenants(before, live.read_watermark())

    assert marks[acme.pk].run == ours.pk
    assert marks[globex.pk].run == theirs[-1].pk > ours.pk
    assert marks[acme.pk].attempt == marks[acme.pk].dead == 0  # nothing of those moved for acme


def test_it_sends_alice_acmes_own_watermark_and_carol_the_system_wide_one(
    client, alice, carol, acme, globex, make_job, make_run, clock
):
    """How busy globex is (its run ids climbing) is not Alice's to see; the superuser sees everything."""
    ours, theirs = make_job(acme, "a.job"), make_job(globex, "g.job")
    alice_headers = cookie_for(client, alice)
    carol_headers = cookie_for(Client(), carol)  # a browser of her own: a second login on one client ends the first

    async def story():
        alices, alice_in, _ = await connect(alice_headers)
        carols, carol_in, _ = await connect(carol_headers)
        assert alice_in and carol_in
        await wait_until_async(poller_ready, message="the poller's baseline")
        await live.poller.poll_once(get_channel_layer())
        own = await db(lambda: make_run(ours, due_at=clock.ahead(minutes=1)))
        busy = await db(lambda: [make_run(theirs, due_at=clock.ahead(minutes=m)) for m in range(1, 6)])
        await live.poller.poll_once(get_channel_layer())

        frame = await alices.receive_json_from(timeout=30)
        assert frame["tenants"] == [acme.pk]
        assert frame["mark"][0] == own.pk  # the run watermark: acme's own newest run
        assert all(value < busy[0].pk or value == 0 for value in frame["mark"]), frame["mark"]
        assert await alices.receive_nothing(timeout=0.3)
        everything = await carols.receive_json_from(timeout=30)
        assert set(everything["tenants"]) == {acme.pk, globex.pk} and everything["mark"][0] == busy[-1].pk
        await closed(alices)
        await closed(carols)

    asyncio.run(story())


def test_it_stops_telling_a_member_about_a_tenant_they_left_while_connected(
    client, alice, acme, globex, make_job, make_run, clock
):
    """Checked when sent, not when the page connected: Alice leaves globex, then hears only of acme."""
    members.grant(globex, alice, "viewer", actor="test")
    ours, theirs = make_job(acme, "a.job"), make_job(globex, "g.job")
    headers = cookie_for(client, alice)

    async def story():
        communicator, connected, _ = await connect(headers)
        assert connected
        await wait_until_async(poller_ready, message="the poller's baseline")
        await live.poller.poll_once(get_channel_layer())
        await db(lambda: members.remove(globex, alice, actor="test"))
        await db(lambda: make_run(theirs, due_at=clock.ahead(minutes=1)))
        await live.poller.poll_once(get_channel_layer())
        assert await communicator.receive_nothing(timeout=0.5)
        await db(lambda: make_run(ours, due_at=clock.ahead(minutes=1)))
        await live.poller.poll_once(get_channel_layer())
        frame = await communicator.receive_json_from(timeout=30)
        assert frame["tenants"] == [acme.pk]
        await closed(communicator)

    asyncio.run(story())


def test_it_disconnects_a_user_who_may_no_longer_use_the_portal(client, alice, acme, make_job, make_run, clock):
    job = make_job(acme, "a.job")
    headers = cookie_for(client, alice)

    async def story():
        communicator, connected, _ = await connect(headers)
        assert connected
        await wait_until_async(poller_ready, message="the poller's baseline")
        await live.poller.poll_once(get_channel_layer())
        await db(lambda: type(alice).objects.filter(pk=alice.pk).update(is_active=False))
        await db(lambda: make_run(job, due_at=clock.ahead(minutes=1)))
        await live.poller.poll_once(get_channel_layer())
        output = await communicator.receive_output(timeout=30)
        assert output == {"type": "websocket.close", "code": 4403}
        await closed(communicator)

    asyncio.run(story())
