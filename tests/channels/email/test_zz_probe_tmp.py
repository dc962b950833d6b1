import asyncio, time, os
from pathlib import Path
from tests.channels.email.conftest import PymapServer, SmtpServer, append, create_folder
from tests.channels.email.test_e2e import Stack, e2e_config, open_stack, owner_mail, stacks, wait_ref, drain
__all__=["stacks"]

async def test_probe_huge(pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]) -> None:
    folder = await create_folder(pymap.port)
    stack = await open_stack(e2e_config(tmp_path, pymap.port, smtp.port, folder))
    stacks.append(stack)
    body = "log line with some text 12345 " * 200000  # ~6 MB
    body = "\n".join(body[i:i+70] for i in range(0, len(body), 70))
    t = time.monotonic()
    await append(pymap.port, folder, owner_mail(1, body, subject="Logs"))
    print("appended", time.monotonic() - t)
    conv = await wait_ref(stack, "<e2e-1@example.org>", timeout=120)
    print("stored", time.monotonic() - t)
    [reply] = await smtp.capture.wait_for(1, timeout=120)
    print("replied", time.monotonic() - t, len(reply.get_content()))
    for p in tmp_path.rglob("*"):
        if p.is_file() and p.stat().st_size > 100000:
            print(p.relative_to(tmp_path), p.stat().st_size)
