"""The one redaction of the project (hyport_lib.utils.redact): one sample of each secret
shape it knows, the names whose variables are secret, private keys across lines, and its
patterns on lines long enough that a quadratic pattern would not finish."""

from __future__ import annotations

import html
import json

import pytest

from hyport_lib.environment.facts import collect_env_vars
from hyport_lib.utils.redact import (REDACTED, PrivateKeyLines, filter_environ, is_secret_name,
                                     redact_url_credentials, scrub_json_text, scrub_obj, scrub_secret_shapes,
                                     scrub_text, secret_values)

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


@pytest.mark.parametrize("secret", ['pa"ss\\word-1', "密码-秘密-42", "it's <b>&amp;</b> x"])
def test_every_encoded_form_of_a_secret_is_scrubbed(secret):
    env = {"MY_SERVICE_TOKEN": secret}
    forms = [secret, json.dumps(secret), json.dumps(secret, ensure_ascii=False),
             json.dumps(json.dumps(secret)), json.dumps(f"prompt = {json.dumps(secret)}"),
             repr(secret), ascii(secret), html.escape(secret), html.escape(json.dumps(secret)),
             html.escape(secret).encode("ascii", "xmlcharrefreplace").decode(),
             json.dumps(f"prompt = {secret!r}")]
    for form in forms:
        out = scrub_text(f"before {form} after", env)
        assert "[redacted]" in out, form
        for leak in (secret, json.dumps(secret)[1:-1], ascii(secret)[1:-1]):
            assert leak not in out, (form, out)
    assert scrub_obj({"k": [f"x{json.dumps(secret)}"]}, env) == {"k": ["x\"[redacted]\""]}


def test_url_credentials_are_redacted_wherever_environment_values_are_shown():
    env = {"MASTER_ADDR": "http://admin:hunter2@10.0.0.1:29500", "HF_ENDPOINT": "https://hf-mirror.com",
           "NCCL_X": "ssh://deploy@host/x"}
    shown = collect_env_vars(env)
    assert shown["MASTER_ADDR"] == "http://[redacted]@10.0.0.1:29500"
    assert shown["HF_ENDPOINT"] == "https://hf-mirror.com"
    assert "hunter2" not in scrub_text("connect to https://u:hunter2@x/y failed", {})


def test_a_setting_in_a_secret_named_variable_is_no_secret_and_json_stays_json():
    assert scrub_text("x false y", {"TOKENIZERS_PARALLELISM": "false"}) == "x false y"
    doc = json.dumps({"flag": False, "text": "code says 12345678 here", "n": 12345678})
    clean = json.loads(scrub_json_text(doc, environ={"MY_KEY": "12345678"}))
    assert clean == {"flag": False, "text": "code says [redacted] here", "n": 12345678}


def test_a_url_password_holding_an_at_sign_or_a_quote_is_redacted_whole():
    assert redact_url_credentials("https://alice:p@ssw0rd@hf-mirror.internal/x") == \
        "https://[redacted]@hf-mirror.internal/x"
    assert "pa" not in redact_url_credentials('http://bob:pa"ss@10.0.0.1')


@pytest.mark.parametrize("text, secret", [
    ('ERROR login failed password="correct horse battery', "correct horse"),  # cut or unclosed
    ("api_key: 'sk9-abc def", "sk9-abc"),
    ('curl --password "Hunter2pass" https://x', "Hunter2pass"),
    ("python run.py --hf-token 'abc123xyz' --x 1", "abc123xyz"),
    ("SSHPASS=Hunter3pass sshpass -e ssh root@h", "Hunter3pass"),
    ("DB_PASS=Hunter4pass ./run", "Hunter4pass"),
    ("+ sshpass -p \\\n   'Hunter5pass' ssh root@h", "Hunter5pass"),
    ("+ python run.py --password \\\n  Hunter6pass --x 1", "Hunter6pass"),
])
def test_secrets_the_landed_shapes_still_showed(text, secret):
    """Found in review of the triage hardening: a quoted value cut short or given to a flag,
    a value on the next line after ``\\``, ``SSHPASS`` / ``DB_PASS``."""
    scrubbed = scrub_secret_shapes(text)
    assert secret not in scrubbed and REDACTED in scrubbed


def test_what_looks_like_a_pass_name_but_is_no_secret_is_left_alone():
    for text in ("PASS: tests/test_a.py", "TEST_PASS=3", "--pass 2", "PASS_RATE: 0.9"):
        assert scrub_secret_shapes(text) == text
    assert is_secret_name("SSHPASS") and is_secret_name("DB_PASSWD") and is_secret_name("SMTP_PASS")
    assert not is_secret_name("PASS") and not is_secret_name("BYPASS_CACHE")
    assert scrub_text("login with abcd1234", {"DB_PASSWD": "abcd1234"}) == "login with [redacted]"


#: (written in a log, its secrets): a netrc file printed whole, on one line or an entry's lines.
NETRC = [
    ("[default0]:[rank0]: machine api.wandb.ai login alice password s3cr3tWandb42", ["s3cr3tWandb42"]),
    ("login alice password hunter2xyz", ["hunter2xyz"]),
    ("netrc: machine obs.example.com login bob passwd Zz9secretZz account acct7", ["Zz9secretZz", "acct7"]),
    ('default login anonymous password "two words"', ["two words"]),
    ("LOGIN svc PASSWORD Abc", ["Abc"]),  # curl reads the keywords in any case; a short one too
    ("machine h\n  login u\n  password p4ssw0rd\n  account acc1", ["p4ssw0rd", "acc1"]),
    ("[default0]:[rank0]: machine h\n[default0]:[rank0]:   login u\n[default0]:[rank0]:   password Sup3rS3cret",
     ["Sup3rS3cret"]),
    ("default\n\tpasswd Sup3rS3cret  ", ["Sup3rS3cret"]),
    # Shapes that Python's netrc and curl read too (issue 42 review): ``user`` for ``login``,
    # quotes inside a value or starting it, an escaped quote, a trailing comment, the value on
    # the line after a line-final ``password``, a short value inside an entry's lines.
    ("machine h.example.com user bob password s3cretPW", ["s3cretPW"]),
    ("machine h\n  user bob password s3cretPW", ["s3cretPW"]),
    ("machine h login bob password s3c'retPW", ["s3c", "retPW"]),
    ('machine h login bob password s3c"retPW', ["s3c", "retPW"]),
    ("machine h login bob password 'retPW'", ["retPW"]),
    ('machine h login bob password "s3c\\"retPW"', ["s3c", "retPW"]),
    ("machine h\n  login bob\n  password s3cretPW # work", ["s3cretPW"]),
    ("machine h login bob password\n  s3cretPW", ["s3cretPW"]),
    ("[default0]:machine h login bob password\n[default0]:  s3cretPW", ["s3cretPW"]),
    ("machine h\n  login bob\n  password abc", ["abc"]),
]


@pytest.mark.parametrize("text, secrets", NETRC, ids=[n[0][:28] for n in NETRC])
def test_netrc_passwords_and_accounts_are_redacted_in_every_scrub(text, secrets):
    """A netrc file printed into a log reached triage's output (issue 42): its ``password``,
    ``passwd`` and ``account`` values are redacted by the shapes (triage) and by
    :func:`scrub_text` (records, logs), the machine and login kept."""
    for scrubbed in (scrub_secret_shapes(text), scrub_text(text, {})):
        assert REDACTED in scrubbed
        for secret in secrets:
            assert secret not in scrubbed, scrubbed
    assert "login u" in scrub_text(NETRC[5][0], {}) and "machine api.wandb.ai login alice" in \
        scrub_secret_shapes(NETRC[0][0])


@pytest.mark.parametrize("text", [
    "password is required", "wrong password", "Error: password required", "the password was rejected",
    "password expired for user bob", "Password reset successful", "Login failed for account alice",
    "account disabled by admin", "[rank0]: password abc",
    # A run counts only where it starts its line or starts with ``machine``, ``default`` only
    # as its line's first word, a line ``password x`` only inside an entry's lines.
    "Error: login failed, password expired for user bob", "using default password policy",
    "The default account quota is exceeded", "[rank0]: password rotated", "\tpasswd Sup3rS3cret",
    "Invalid login or password for user bob", "login required: account suspended",
    "step 3\n[rank0]: password rotated", "machine h login u\nstep 4\n  password rotated",
    "password none", "machine h login u password false",  # a setting, as for variables
    "Please enter the password:",
])
def test_prose_that_says_password_or_account_is_left_alone(text):
    assert scrub_secret_shapes(text) == text
    assert scrub_text(text, {}) == text


def test_netrc_lines_read_one_by_one_keep_their_entry_and_its_secrets():
    """The triage reads a log line by line: a multi-line entry's ``password`` line, a value on
    the next line, and a secret redacted in an entry then repeated in prose are all caught."""
    lines = PrivateKeyLines()
    scrubbed = [lines.scrub(line) for line in (
        "[rank0]: machine h", "[rank0]:   login svc", "[rank0]:   password abc", "[rank0]: step 4", "[rank0]: password rotated",
        "[rank0]: machine g login svc password", "[rank0]:   Zz9nextline",
        "[rank0]: OSError: upload refused for login svc passwd Zz9nextline")]
    assert scrubbed == ["[rank0]: machine h", "[rank0]:   login svc", f"[rank0]:   password {REDACTED}",
                        "[rank0]: step 4", "[rank0]: password rotated", "[rank0]: machine g login svc password",
                        f"[rank0]:   {REDACTED}", f"[rank0]: OSError: upload refused for login svc passwd {REDACTED}"]


def test_netrc_pairs_are_found_in_linear_time_on_a_long_line():
    # Each run of pairs is read once and only a run that starts its line looks for the line's
    # end: 70000 prose runs on one line would otherwise scan the rest of it each time.
    line = "wrong password xyz1, " * 70000 + "\nlogin a password zz9-secret"
    scrubbed = scrub_secret_shapes(line)
    assert scrubbed.endswith("login a password [redacted]") and "xyz1" in scrubbed
