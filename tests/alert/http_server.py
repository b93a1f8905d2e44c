#!/usr/bin/python3
"""A loopback HTTP server for gpualert's webhook and ntfy tests. Every POST is saved to
--dir as <n>.json: {"path", "headers", "body"}. --status sets the reply code (500 makes
every delivery fail). The port is written to --port-file once listening."""
import argparse
import http.server
import json
import os
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--port-file", required=True)
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--status", type=int, default=200)
args = ap.parse_args()
os.makedirs(args.dir, exist_ok=True)
lock = threading.Lock()
count = [0]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if args.status == 200:
            with lock:
                count[0] += 1
                n = count[0]
            with open(os.path.join(args.dir, "%03d.json.tmp" % n), "w") as f:
                json.dump({"path": self.path, "headers": dict(self.headers.items()),
                           "body": body.decode("utf-8", "replace")}, f)
            os.rename(os.path.join(args.dir, "%03d.json.tmp" % n), os.path.join(args.dir, "%03d.json" % n))
        self.send_response(args.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(args.port_file + ".tmp", args.port_file)
srv.serve_forever()
