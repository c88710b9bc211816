#!/usr/bin/env python3
"""Drives runledger-tui in a pseudo-terminal for the smoke tests.

usage: pty_driver.py <binary> <steps.json> [args...]

The steps are a JSON list of ["wait", text], ["key", text], ["quit"], ["signal", "TERM" or
"HUP"] (send the signal, wait for the exit) or ["hangup"] (close the terminal as a killed tmux
session or a closed window does, wait for the exit). Output is fed to a
small VT100 screen model (cursor moves, clears, text; colours ignored) so that "wait" looks
for text on the screen as a user would see it, not in the raw byte stream. Every wait has a
deadline; on failure the screen is printed and the exit status is 1.
"""

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

ROWS, COLS = 40, 160
DEADLINE = 20.0


class Screen:
    def __init__(self):
        self.grid = [[" "] * COLS for _ in range(ROWS)]
        self.row = self.col = 0
        self.pending = ""
        self.raw = ""

    def feed(self, text):
        self.raw += text
        data = self.pending + text
        self.pending = ""
        i = 0
        while i < len(data):
            ch = data[i]
            if ch == "\x1b":
                if i + 1 >= len(data):
                    self.pending = data[i:]
                    return
                nxt = data[i + 1]
                if nxt == "[":
                    m = re.match(r"\x1b\[([0-9;?]*)([ -/]*)([@-~])", data[i:])
                    if not m:
                        self.pending = data[i:]
                        return
                    self.csi(m.group(1), m.group(3))
                    i += m.end()
                    continue
                if nxt == "]":
                    end = re.search(r"(\x07|\x1b\\)", data[i:])
                    if not end:
                        self.pending = data[i:]
                        return
                    i += end.end()
                    continue
                i += 2
                continue
            if ch == "\r":
                self.col = 0
            elif ch == "\n":
                self.row = min(self.row + 1, ROWS - 1)
            elif ch == "\x08":
                self.col = max(self.col - 1, 0)
            elif ch >= " ":
                if self.row < ROWS and self.col < COLS:
                    self.grid[self.row][self.col] = ch
                self.col += 1
            i += 1

    def csi(self, params, final):
        nums = [int(p) if p.isdigit() else 0 for p in params.lstrip("?").split(";")] if params else []
        first = nums[0] if nums else 0
        if final in "Hf":
            self.row = max((nums[0] if len(nums) > 0 and nums[0] else 1) - 1, 0)
            self.col = max((nums[1] if len(nums) > 1 and nums[1] else 1) - 1, 0)
        elif final == "J":
            if first == 2 or first == 3:
                self.grid = [[" "] * COLS for _ in range(ROWS)]
            elif first == 0:
                self.grid[self.row][self.col:] = [" "] * (COLS - self.col)
                for r in range(self.row + 1, ROWS):
                    self.grid[r] = [" "] * COLS
        elif final == "K":
            if first == 0:
                self.grid[self.row][self.col:] = [" "] * (COLS - self.col)
            elif first == 2:
                self.grid[self.row] = [" "] * COLS
        elif final == "A":
            self.row = max(self.row - max(first, 1), 0)
        elif final == "B":
            self.row = min(self.row + max(first, 1), ROWS - 1)
        elif final == "C":
            self.col = min(self.col + max(first, 1), COLS - 1)
        elif final == "D":
            self.col = max(self.col - max(first, 1), 0)
        elif final == "G":
            self.col = max(first - 1, 0)

    def text(self):
        return "\n".join("".join(r).rstrip() for r in self.grid)


def main():
    binary, steps = sys.argv[1], json.loads(sys.argv[2])
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = dict(os.environ, TERM="xterm-256color")
    proc = subprocess.Popen(
        [binary] + sys.argv[3:], stdin=slave, stdout=slave, stderr=slave, env=env,
        start_new_session=True,
    )
    os.close(slave)
    screen = Screen()

    def pump(timeout):
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(master, 65536)
        except OSError:
            return False
        if not chunk:
            return False
        screen.feed(chunk.decode("utf-8", errors="replace"))
        return True

    def fail(message):
        print("FAIL: " + message)
        print("----- screen -----")
        print(screen.text())
        proc.kill()
        sys.exit(1)

    def wait_exit(what):
        deadline = time.monotonic() + DEADLINE
        while proc.poll() is None:
            if time.monotonic() > deadline:
                fail("did not exit after " + what)
            if master is None:
                time.sleep(0.05)
            else:
                pump(0.1)
        if master is not None:
            while pump(0.05):
                if not select.select([master], [], [], 0)[0]:
                    break
        print("EXIT: %d" % proc.returncode)

    for step in steps:
        if step[0] == "hangup":
            os.close(master)
            master = None
            wait_exit("the terminal hung up")
        elif step[0] == "signal":
            proc.send_signal(getattr(signal, "SIG" + step[1]))
            wait_exit("SIG" + step[1])
            print("RESTORED: %s" % ("\x1b[?1049l" in screen.raw and "\x1b[?25h" in screen.raw))
        elif step[0] == "wait":
            deadline = time.monotonic() + DEADLINE
            while step[1] not in screen.text():
                if time.monotonic() > deadline:
                    fail("timed out waiting for %r" % step[1])
                if not pump(0.1) and proc.poll() is not None:
                    fail("the program exited (status %s) while waiting for %r" % (proc.returncode, step[1]))
            print("SEEN: " + step[1])
        elif step[0] == "key":
            os.write(master, step[1].encode())
        elif step[0] == "quit":
            os.write(master, b"q")
            deadline = time.monotonic() + DEADLINE
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    fail("did not exit after q")
                pump(0.1)
            while pump(0.05):
                if not select.select([master], [], [], 0)[0]:
                    break
            print("EXIT: %d" % proc.returncode)
            # Leaving the alternate screen and showing the cursor again: the terminal is restored.
            print("RESTORED: %s" % ("\x1b[?1049l" in screen.raw and "\x1b[?25h" in screen.raw))
    print("----- final screen -----")
    print(screen.text())


if __name__ == "__main__":
    main()
