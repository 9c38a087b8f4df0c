"""Roles: what a tenant member or a team token may do, and the one rule that compares them.

Three roles, each allowing what the one before it does and more:

- viewer: reads only (every portal page, every GET of the API);
- operator: also the operations on runs and jobs that change no definition:
  pause, resume (a job, a tenant or a queue), trigger, a one-off run, cancel
  runs, replay and discard dead letters, backfill;
- owner: also what defines the tenant's work: job definitions (create, edit,
  delete), schedules-as-code applies and adopting drift, API tokens and the
  webhook signing secret, members and their roles, maintenance windows and
  calendars.

Superusers are above every role (they see and do everything). A role is read
when it is used, never cached with the session or the token, so a member
demoted mid-session loses the action at the next request. Each door states
the role it needs with the constants below (`OPERATE`, `OWN`), and asks
`require(role, needed, what)`; docs/security.md has the table of doors.
"""

from jobs.choices import Role

# What each kind of door needs. Reads need VIEW.
VIEW = Role.VIEWER
OPERATE = Role.OPERATOR
OWN = Role.OWNER

RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.OWNER: 2}


class InsufficientRole(Exception):
    """The caller's role does not allow `what`: it holds `role` (None: none at all), `needed` is required.

    `where` names the tenant for the message ("in acme"); empty for a token, whose tenant is its own.
    """

    def __init__(self, role, needed, what, where=""):
        self.role, self.needed, self.what = role, Role(needed), what
        held = f"the role {role}" if role else "no role"
        super().__init__(f"{what} needs the role {self.needed} or above; you have {held}{where and ' in ' + where}.")


def allows(role, needed):
    """Whether `role` (a Role, its value, or None/"" for none) allows what `needed` requires."""
    if not role:
        return False
    return RANK[Role(role)] >= RANK[Role(needed)]


def require(role, needed, what, where=""):
    """Raise InsufficientRole unless `role` allows `needed`; `what` and `where` name the action and tenant."""
    if not allows(role, needed):
        raise InsufficientRole(role, needed, what, where)


def weakest(roles):
    """The lowest of `roles` (None when empty or when one is missing): what a request over several tenants may do."""
    roles = list(roles)
    if not roles or not all(roles):
        return None
    return min((Role(r) for r in roles), key=RANK.__getitem__)
