#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub, for quill's pull tests: the parts of the API quill and huggingface_hub
use, served from a directory of repositories (ROOT/owner/repo/files).

  GET  /api/models/{owner}/{repo}/tree/{revision}   the file listing: type, path, size, oid, lfs {oid, size}
  HEAD/GET /{owner}/{repo}/resolve/{revision}/{path}
       an LFS file (*.gguf): 302 to http://localhost:PORT/cas/{sha256} (another host name, like the hub's CDN), with X-Repo-Commit, X-Linked-Etag, X-Linked-Size, ETag
       a git file: 200 with the bytes, X-Repo-Commit and ETag (the git blob oid)
  HEAD/GET /cas/{sha256}                           the bytes, with Range (206, Content-Range) and ETag
Errors: 401 for a --gated repository without "Authorization: Bearer TOKEN", 404 with X-Error-Code for an unknown
repository or file, and --status-once CODE answers the first API request with CODE (429: with Retry-After: 1).
Faults: --drop-once sends half of the first full GET of each blob and closes the connection; --corrupt flips one
byte of every blob sent; --rate B sends blobs at B bytes a second; --odd-listing adds to each listing entries whose
members have other types than the hub's (a number for a type or path, a string for a size, an object for an oid);
--bad-listing answers every listing with text that is not JSON (as a proxy's error page is).
Every request is logged as a JSON line in --log: method, path, range, status, body bytes sent.
The port it listens on (127.0.0.1, chosen by the system) is written to --port-file once it is listening.
"""
import argparse
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--gated", action="append", default=[])
    p.add_argument("--token", default="secret-token")
    p.add_argument("--drop-once", action="store_true")
    p.add_argument("--corrupt", action="store_true")
    p.add_argument("--rate", type=int, default=0)
    p.add_argument("--status-once", type=int, default=0)
    p.add_argument("--odd-listing", action="store_true")
    p.add_argument("--bad-listing", action="store_true")
    return p.parse_args()


ARGS = parse_args()
LOCK = threading.Lock()
STATE = {"dropped": set(), "status_sent": False}


def repo_files(repo):
    """(path, absolute path) of every file of a repository, sorted."""
    base = os.path.join(ARGS.root, repo)
    out = []
    for d, _, names in os.walk(base):
        for n in names:
            full = os.path.join(d, n)
            out.append((os.path.relpath(full, base).replace(os.sep, "/"), full))
    return sorted(out)


def is_lfs(path):
    return path.endswith(".gguf")


def sha256_of(full):
    h = hashlib.sha256()
    with open(full, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_oid(full):
    data = open(full, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit_of(repo):
    h = hashlib.sha1(repo.encode())
    for path, full in repo_files(repo):
        h.update(path.encode() + str(os.path.getsize(full)).encode())
    return h.hexdigest()


def blob_by_sha(sha):
    for d, _, names in os.walk(ARGS.root):
        for n in names:
            full = os.path.join(d, n)
            if is_lfs(n) and sha256_of(full) == sha:
                return full
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request a connection: a dropped transfer is a closed connection

    def log_message(self, *args):
        pass

    def record(self, status, sent):
        entry = {"method": self.command, "path": self.path, "range": self.headers.get("Range", ""),
                 "status": status, "bytes": sent, "auth": bool(self.headers.get("Authorization"))}
        with LOCK, open(ARGS.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # Logged before the body goes out: a client that has read it all finds it in the log.
        self.record(status, 0 if self.command == "HEAD" else len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message):
        self.reply(status, json.dumps({"error": message}).encode(),
                   {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"})

    def authorized(self, repo):
        return repo not in ARGS.gated or self.headers.get("Authorization") == "Bearer " + ARGS.token

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = unquote(urlparse(self.path).path)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            return self.tree("/".join(parts[2:4]))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve("/".join(parts[0:2]), "/".join(parts[4:]))
        if len(parts) == 2 and parts[0] == "cas":
            return self.blob(parts[1])
        self.error(404, "EntryNotFound", "no such route")

    def check_repo(self, repo):
        if not os.path.isdir(os.path.join(ARGS.root, repo)):
            self.error(404, "RepoNotFound", "Repository not found")
            return False
        if not self.authorized(repo):
            self.error(401, "GatedRepo", "Access to this repository is restricted")
            return False
        return True

    def tree(self, repo):
        with LOCK:
            once = ARGS.status_once and not STATE["status_sent"]
            STATE["status_sent"] = True
        if once:
            return self.reply(ARGS.status_once, b"{}", {"Retry-After": "1"})
        if not self.check_repo(repo):
            return
        if ARGS.bad_listing:
            return self.reply(200, b"<html><body>Bad gateway</body></html>", {"Content-Type": "application/json"})
        items = []
        for path, full in repo_files(repo):
            size = os.path.getsize(full)
            item = {"type": "file", "path": path, "size": size, "oid": git_oid(full)}
            if is_lfs(path):
                item["lfs"] = {"oid": sha256_of(full), "size": size, "pointerSize": 134}
            items.append(item)
            if ARGS.odd_listing:
                items.append({"type": 7, "path": path + ".odd", "size": size})
                items.append({"type": "file", "path": 5, "size": size})
                items.append({"type": "file", "path": path + ".txt", "size": str(size), "lfs": {"oid": {"a": 1}, "size": -1}})
                items.append("a string, not an object")
        self.reply(200, json.dumps(items).encode(), {"Content-Type": "application/json"})

    def resolve(self, repo, file):
        if not self.check_repo(repo):
            return
        full = os.path.join(ARGS.root, repo, file)
        if not os.path.isfile(full):
            return self.error(404, "EntryNotFound", "Entry not found")
        headers = {"X-Repo-Commit": commit_of(repo)}
        if is_lfs(file):
            sha = sha256_of(full)
            # The blob lives on another host name, as the hub's CDN does: a client must not send it the token.
            host = "localhost:%d" % self.server.server_address[1]
            headers.update({"Location": "http://%s/cas/%s" % (host, sha), "X-Linked-Etag": '"%s"' % sha,
                            "X-Linked-Size": str(os.path.getsize(full)), "ETag": '"%s"' % git_oid(full)})
            return self.reply(302, b"", headers)
        headers["ETag"] = '"%s"' % git_oid(full)
        self.reply(200, open(full, "rb").read(), headers)

    def blob(self, sha):
        full = blob_by_sha(sha)
        if full is None:
            return self.error(404, "EntryNotFound", "no such blob")
        data = bytearray(open(full, "rb").read())
        if ARGS.corrupt:
            data[len(data) // 2] ^= 0x01
        start, end, status = 0, len(data), 200
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a)
            end = min(int(b) + 1, len(data)) if b else len(data)
            status = 206
        body = bytes(data[start:end])
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"%s"' % sha)
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return self.record(status, 0)
        with LOCK:
            drop = ARGS.drop_once and not rng and sha not in STATE["dropped"]
            if drop:
                STATE["dropped"].add(sha)
        if drop:
            body = body[: len(body) // 2]
        sent = 0
        step = max(1, ARGS.rate // 20) if ARGS.rate else len(body) or 1
        try:
            while sent < len(body):
                chunk = body[sent:sent + step]
                if sent + len(chunk) == len(body):
                    self.record(status, len(body))  # before the last bytes, as reply() does
                self.wfile.write(chunk)
                sent += len(chunk)
                if ARGS.rate:
                    self.wfile.flush()
                    time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            self.record(status, sent)
        if not body:
            self.record(status, 0)
        if drop:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, ARGS.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
