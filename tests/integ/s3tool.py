"""s3tool.py - the tests' own view of the bucket, through boto3 (not ckptd's
code): set the test server up, list, fetch, and check that every step the
remote shows is complete.

  s3tool.py ENDPOINT setup CREDS_FILE     user + key + policy + bucket "ckpt-test"
  s3tool.py ENDPOINT ls PREFIX            "key size etag" lines
  s3tool.py ENDPOINT get KEY FILE
  s3tool.py ENDPOINT put KEY FILE         (to damage the bucket's copy)
  s3tool.py ENDPOINT uploads PREFIX       multipart uploads in progress
  s3tool.py ENDPOINT steps PREFIX/JOB     complete steps (manifest there), oldest first
  s3tool.py ENDPOINT check PREFIX/JOB     every complete step: each manifest file
                                          there with its size and SHA-256
  s3tool.py ENDPOINT mkbucket|rmbucket B  make bucket B, or remove it (empty)
Credentials come from $S3TOOL_CREDS (an AWS credentials file) after setup.
check compares the digest each manifest entry names (sha256 or xxh3_128).
"""
import configparser
import json
import os
import sys

import boto3
from botocore.config import Config

import fdigest

BUCKET = "ckpt-test"


def client(endpoint, service="s3", key=None, secret=None):
    if key is None:
        cp = configparser.ConfigParser()
        cp.read(os.environ["S3TOOL_CREDS"])
        key = cp["default"]["aws_access_key_id"]
        secret = cp["default"]["aws_secret_access_key"]
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret,
                        config=Config(retries={"max_attempts": 3}))


def setup(endpoint, creds):
    # the server checks signatures once these first (unsigned) calls are done
    iam = client(endpoint, "iam", "setup", "setup")
    iam.create_user(UserName="ckptd")
    k = iam.create_access_key(UserName="ckptd")["AccessKey"]
    iam.put_user_policy(UserName="ckptd", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    client(endpoint, "s3", "setup", "setup").create_bucket(Bucket=BUCKET)
    fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                % (k["AccessKeyId"], k["SecretAccessKey"]))


def keys(s3, prefix):
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out += page.get("Contents", [])
    return out


def steps(s3, jobprefix):
    return sorted(k["Key"].split("/")[-2] for k in keys(s3, jobprefix + "/")
                  if k["Key"].endswith("/checkpoint_manifest.json"))


def digest_ok(f, body):
    """body's digest is the one its manifest entry names."""
    k = fdigest.key_of(f)
    return fdigest.hexdigest(k, body) == f[k]


def check(s3, jobprefix):
    bad = 0
    for it in steps(s3, jobprefix):
        base = "%s/%s/" % (jobprefix, it)
        m = json.loads(s3.get_object(Bucket=BUCKET, Key=base + "checkpoint_manifest.json")
                       ["Body"].read())
        for f in m["files"]:
            # an older step's object, when the file did not change
            key = "%s/%s" % (jobprefix, f["object"]) if "object" in f else base + f["path"]
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            if len(body) != f["size"] or not digest_ok(f, body):
                print("BAD %s" % key)
                bad = 1
        print("ok %s (%d files, %d referenced)" % (it, len(m["files"]),
                                                   sum("object" in f for f in m["files"])))
    return bad


def main():
    endpoint, cmd, arg = sys.argv[1], sys.argv[2], sys.argv[3]
    if cmd == "setup":
        return setup(endpoint, arg)
    s3 = client(endpoint)
    if cmd == "ls":
        for k in keys(s3, arg):
            print(k["Key"], k["Size"], k["ETag"].strip('"'))
    elif cmd == "get":
        with open(sys.argv[4], "wb") as f:
            f.write(s3.get_object(Bucket=BUCKET, Key=arg)["Body"].read())
    elif cmd == "put":
        with open(sys.argv[4], "rb") as f:
            s3.put_object(Bucket=BUCKET, Key=arg, Body=f.read())
    elif cmd == "rm":
        s3.delete_object(Bucket=BUCKET, Key=arg)
    elif cmd == "uploads":
        for u in s3.list_multipart_uploads(Bucket=BUCKET, Prefix=arg).get("Uploads", []):
            print(u["Key"], u["UploadId"])
    elif cmd == "steps":
        print(" ".join(steps(s3, arg)))
    elif cmd == "check":
        return check(s3, arg)
    elif cmd == "mkbucket":
        s3.create_bucket(Bucket=arg)
    elif cmd == "rmbucket":
        s3.delete_bucket(Bucket=arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
