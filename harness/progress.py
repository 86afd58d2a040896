"""Rich progress for jar downloads (Maven reports each artifact it fetches; we count them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harness.maven import ProgressCallback


@contextmanager
def download_progress(enabled: bool, description: str) -> Iterator[ProgressCallback | None]:
    """A callback for `harness.maven` that shows a spinner with the artifact count, or None."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.completed} artifacts"),
        TextColumn("[dim]{task.fields[last]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=None, last="")

        def callback(artifact: str | None) -> None:
            if artifact is not None:
                progress.update(task, advance=1, last=artifact)

        yield callback
