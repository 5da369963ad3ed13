"""The four calls moto answers without a signature when started with
INITIAL_NO_AUTH_ACTION_COUNT=4 (../shared/providers/capture/moto-auth-setup.py): an IAM user, its
access key, a policy allowing ses:*, and the sender identity news@example.com. Everything after
must carry a valid SigV4 signature of that key. Prints the key id and secret.
Usage: python moto-ses-setup.py http://127.0.0.1:PORT"""
import json
import sys

import boto3

ep = sys.argv[1]
kw = dict(region_name="us-east-1", endpoint_url=ep, aws_access_key_id="AKIDEXAMPLE",
          aws_secret_access_key="secret")
iam = boto3.client("iam", **kw)
iam.create_user(UserName="sender")
key = iam.create_access_key(UserName="sender")["AccessKey"]
iam.put_user_policy(UserName="sender", PolicyName="ses", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ses:*", "Resource": "*"}]}))
boto3.client("sesv2", **kw).create_email_identity(EmailIdentity="news@example.com")
print(key["AccessKeyId"], key["SecretAccessKey"])
