from django.core.management.base import BaseCommand

from bench import demo


class Command(BaseCommand):
    help = "Create the demo tenant, its sample jobs and an admin login (idempotent). Prints the login."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username, **options):
        username, password = demo.setup(username)
        self.stdout.write(f"login: {username} / {password}")
