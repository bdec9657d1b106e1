"""A local S3-compatible object store that checks keys: ``moto_server`` with IAM authentication on.

``python -m digideep_stack.object_store --host 127.0.0.1 --port 9000`` reads ``AWS_ACCESS_KEY_ID``
and ``AWS_SECRET_ACCESS_KEY`` from its environment, registers them as the keys of one IAM user
allowed every S3 action, switches moto's request signing checks on (``INITIAL_NO_AUTH_ACTION_COUNT``
= 0) and serves S3 until stopped. A request signed with any other key is refused with 403
(``InvalidAccessKeyId`` or ``SignatureDoesNotMatch``), as a real bucket refuses it. moto keeps its
objects in memory: this store is for one machine's development stack and the tests; a lab points
the stack at a real bucket instead (``--s3-endpoint``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

USER = "digideep"
ALLOW_S3 = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
)


def register_keys(access_key_id: str, secret_access_key: str) -> None:
    """Make ``access_key_id``/``secret_access_key`` the keys of an IAM user that may do anything on S3."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.iam.models import iam_backends

    backend = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_user(region_name="us-east-1", user_name=USER)
    backend.put_user_policy(USER, "s3-all", ALLOW_S3)
    key = backend.create_access_key(USER)
    del backend.access_keys[key.physical_resource_id]
    key.access_key_id = access_key_id
    key.secret_access_key = secret_access_key
    backend.access_keys[key.physical_resource_id] = key


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="moto's S3 server with its access keys checked.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    arguments = parser.parse_args(argv)
    key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key_id or not secret:
        sys.exit("object_store: error: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (the .env holds them)")
    from moto import settings
    from moto.server import main as moto_main

    register_keys(key_id, secret)
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    moto_main(["-H", arguments.host, "-p", str(arguments.port)])


if __name__ == "__main__":
    main()
