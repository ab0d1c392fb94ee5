"""Fixtures of the Ansible user's path tests (defined in user_path_support, a module name no other
suite uses, so `pytest tests` imports the right helpers)."""

# pytest fixtures, used by name in the tests
from user_path_support import built, stack  # noqa: F401  pylint: disable=unused-import
