#!/usr/bin/python3
"""A real SMTP server on loopback for gpualert's tests (aiosmtpd).

Modes:
  accept       accept every message (AUTH checked when --auth is given)
  reject-auth  refuse every AUTH attempt (535)
  reject-rcpt  answer 550 to recipients whose address contains "reject"
  blackhole    accept TCP connections and never say anything
TLS: --tls none | starttls (required before MAIL) | smtps (implicit TLS), with --cert/--key.
Each accepted message is written to --maildir as <n>.eml plus <n>.json (envelope).
The chosen port is written to --port-file once the server listens.
"""
import argparse
import json
import os
import socket
import ssl
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="accept", choices=["accept", "reject-auth", "reject-rcpt", "blackhole"])
    ap.add_argument("--tls", default="none", choices=["none", "starttls", "smtps"])
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--auth", help="user:password required")
    ap.add_argument("--maildir", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0, help="listen here (default: a free port)")
    args = ap.parse_args()
    os.makedirs(args.maildir, exist_ok=True)

    if args.mode == "blackhole":
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", args.port))
        srv.listen(16)
        held = []
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(srv.getsockname()[1]))
        os.rename(args.port_file + ".tmp", args.port_file)
        while True:
            conn, _ = srv.accept()
            held.append(conn)  # never answer, never close

    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    counter = {"n": 0}
    lock = threading.Lock()

    class Handler:
        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
            if args.mode == "reject-rcpt" and "reject" in address:
                return "550 5.1.1 <%s>: recipient rejected" % address
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server, session, envelope):
            with lock:
                counter["n"] += 1
                n = counter["n"]
            base = os.path.join(args.maildir, "%03d" % n)
            with open(base + ".eml.tmp", "wb") as f:
                f.write(envelope.original_content or envelope.content)
            with open(base + ".json", "w") as f:
                json.dump({"from": envelope.mail_from, "to": envelope.rcpt_tos,
                           "auth": session.authenticated, "tls": session.ssl is not None
                           or server.transport.get_extra_info("ssl_object") is not None}, f)
            os.rename(base + ".eml.tmp", base + ".eml")
            return "250 Message accepted for delivery"

    def authenticator(server, session, envelope, mechanism, auth_data):
        if args.mode == "reject-auth":
            return AuthResult(success=False, handled=False)
        if not isinstance(auth_data, LoginPassword) or not args.auth:
            return AuthResult(success=False, handled=False)
        user, password = args.auth.split(":", 1)
        ok = auth_data.login.decode() == user and auth_data.password.decode() == password
        return AuthResult(success=ok)

    ctx = None
    if args.tls != "none":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.cert, args.key)
    port = args.port or free_port()
    kw = dict(hostname="127.0.0.1", port=port, authenticator=authenticator,
              auth_required=bool(args.auth) or args.mode == "reject-auth", auth_require_tls=False)
    if args.tls == "smtps":
        kw["ssl_context"] = ctx
    elif args.tls == "starttls":
        kw["tls_context"] = ctx
        kw["require_starttls"] = True
    controller = Controller(Handler(), **kw)
    controller.start()
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.rename(args.port_file + ".tmp", args.port_file)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
