"""The one redaction of the project (hyport_lib.utils.redact): one sample of each secret
shape it knows, the names whose variables are secret, private keys across lines, and its
patterns on lines long enough that a quadratic pattern would not finish."""

from __future__ import annotations

import pytest

from hyport_lib.utils.redact import (REDACTED, PrivateKeyLines, filter_environ, is_secret_name,
                                     scrub_secret_shapes, scrub_text, secret_values)

#: (written in a log, the secret in it, what must stay). One sample per shape.
SHAPES = [
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "Authorization: Basic "),
    ("-H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30'", "eyJhbGciOiJIUzI1NiJ9.e30", "Bearer "),
    ("HUAWEICLOUD_SDK_AK=HPUA4WQTKXN0ZB7DEMO1", "HPUA4WQTKXN0ZB7DEMO1", "HUAWEICLOUD_SDK_AK="),
    ("export HUAWEICLOUD_SDK_SK=q8Zr2LmV0xNw5TbYc7Hd3Ka9Pf6Gs1Ju4Ei0oDmo", "q8Zr2LmV0xNw5TbYc7Hd3Ka9Pf6Gs1Ju4Ei0oDmo",
     "HUAWEICLOUD_SDK_SK="),
    ('{"access_key_id": "HPUA4WQTKXN0ZB7DEMO1"}', "HPUA4WQTKXN0ZB7DEMO1", '"access_key_id": "'),
    ("secret_access_key: q8Zr2LmV0xNw5TbYc7Hd3Ka9", "q8Zr2LmV0xNw5TbYc7Hd3Ka9", "secret_access_key: "),
    ("OBS_AK=HPUA4WQTKXN0ZB7DEMO1 OBS_SK=q8Zr2LmV0xNw5TbY", "q8Zr2LmV0xNw5TbY", "OBS_AK=[redacted] OBS_SK="),
    ("jdbc:mysql://db:3306/app?user=svc&pwd=hunter2-demo", "hunter2-demo", "user=svc&pwd="),
    ("Server=db;UID=sa;PWD=Tr0ub4dor;", "Tr0ub4dor", "UID=sa;PWD="),
    ("git clone https://oauth2:glpat-xY3zQ9rT2mK8vN1bW4cD@gitlab.example/x.git token glpat-Ab12Cd34Ef56Gh78Ij90",
     "glpat-Ab12Cd34Ef56Gh78Ij90", "token "),
    ("curl -sS -u alice:s3cr3t-pass https://repo.example/simple", "s3cr3t-pass", "curl -sS -u alice:"),
    ("curl --user 'alice:two words' https://x", "two words", "--user 'alice:"),
    ("sshpass -p 'P@ss w0rd' ssh root@npu-host", "P@ss w0rd", "ssh root@npu-host"),
    ('"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkq\\n-----END PRIVATE KEY-----\\n"',
     "MIIEvQIBADANBgkq", '"private_key": '),
]


@pytest.mark.parametrize("text, secret, kept", SHAPES, ids=[s[0][:24] for s in SHAPES])
def test_each_secret_shape_is_redacted_and_its_name_kept(text, secret, kept):
    scrubbed = scrub_secret_shapes(text)
    assert secret not in scrubbed and REDACTED in scrubbed
    assert kept in scrubbed


@pytest.mark.parametrize("text", [
    "PWD=/home/user/run OLDPWD=/tmp",  # the shell's working folders
    "docker run -u 1000:1000 image",  # a user and group, not curl's user:password
    "Running basic configuration checks",  # "basic" that is no Authorization scheme
    "TASK_ID=12 DISK=sda1",  # SK and AK only as whole name parts
    "KeyError: 'access_key_id'",
])
def test_what_only_looks_like_a_new_shape_is_left_alone(text):
    assert scrub_secret_shapes(text) == text


def test_huawei_access_keys_set_in_the_environment_are_secret_by_their_name_parts():
    environ = {"OBS_AK": "HPUA4WQTKXN0ZB7DEMO1", "HUAWEICLOUD_SDK_SK": "q8Zr2LmV0xNw5TbY",
               "MA_SK": "Zz9-private", "MYSQL_PWD": "Tr0ub4dor", "PWD": "/home/user", "TASK": "train",
               "OBS_ENDPOINT": "https://obs.example"}
    assert [n for n in environ if is_secret_name(n)] == ["OBS_AK", "HUAWEICLOUD_SDK_SK", "MA_SK", "MYSQL_PWD"]
    line = "uploading with HPUA4WQTKXN0ZB7DEMO1 / q8Zr2LmV0xNw5TbY / Zz9-private / Tr0ub4dor in /home/user"
    assert scrub_text(line, environ) == ("uploading with [redacted] / [redacted] / [redacted] / [redacted] "
                                         "in /home/user")
    assert "/home/user" not in secret_values(environ)
    assert filter_environ(["OBS_", "MA_"], environ=environ) == {"OBS_ENDPOINT": "https://obs.example"}


def test_a_private_key_is_redacted_in_one_text_and_across_lines_read_one_by_one():
    key = ["-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
           "QyNTUxOQAAACBkZW1vLWtleS1ub3QtcmVhbA", "-----END OPENSSH PRIVATE KEY-----"]
    whole = scrub_secret_shapes("\n".join(["before", *key, "after"]))
    assert whole == "before\n-----BEGIN OPENSSH PRIVATE KEY-----[redacted]-----END OPENSSH PRIVATE KEY-----\nafter"
    lines = PrivateKeyLines()
    shown = [lines.scrub(line) for line in ["before", *key, "after HF_TOKEN=x"]]
    assert shown == ["before", key[0] + REDACTED, REDACTED, REDACTED, REDACTED + key[3], "after HF_TOKEN=x"]
    # A key cut short (the log ends inside it) is redacted to the end.
    assert scrub_secret_shapes("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIDemo") == \
        "-----BEGIN EC PRIVATE KEY-----[redacted]"


def test_url_credentials_are_found_in_linear_time_on_a_megabyte_line():
    # No timer: the scheme pattern used to start again at every "." and "-" of a long
    # ``a.b-c...`` run, which on this 1 MiB line is about an hour of matching (3.5 s at
    # 32 KiB, quadratic); bounded, it is milliseconds. A regression hangs this test.
    run = "mirror-a.example-b." * (2**20 // 19)
    line = f"{run}https://user:pa55word@{run}host/path failed https://{run}"
    scrubbed = scrub_secret_shapes(line)
    assert "pa55word" not in scrubbed and f"{run}https://[redacted]@{run}host/path" in scrubbed
    # A scheme glued to the word before it is still a URL's (it has no word boundary).
    assert scrub_secret_shapes("xxhttps://u:p4ss@h") == "xxhttps://[redacted]@h"
