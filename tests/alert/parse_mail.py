#!/usr/bin/python3
"""Parses a received message for the tests: prints JSON with the headers, the body parts
and the attachments, and writes each attachment's bytes to OUT_DIR/<filename>."""
import email
import email.policy
import json
import os
import sys

msg = email.message_from_bytes(open(sys.argv[1], "rb").read(), policy=email.policy.default)
out_dir = sys.argv[2]
os.makedirs(out_dir, exist_ok=True)
result = {"subject": str(msg["Subject"]), "to": str(msg["To"]), "from": str(msg["From"]),
          "content_type": msg.get_content_type(), "parts": [], "attachments": []}
for part in msg.walk():
    if part.is_multipart():
        continue
    if part.get_content_disposition() == "attachment":
        data = part.get_payload(decode=True)
        name = part.get_filename()
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        result["attachments"].append({"name": name, "size": len(data), "type": part.get_content_type()})
    else:
        result["parts"].append({"type": part.get_content_type(), "text": part.get_content()})
print(json.dumps(result))
