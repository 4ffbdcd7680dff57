"""`xbench data download`: MNIST, for users with internet (tests and CI never do this)."""
import click

from xbench.common.workload import mnist


@click.group("data")
def data_group():
    """Get MNIST."""


@data_group.command("download")
@click.option("--to", "folder", required=True, type=click.Path(file_okay=False),
              help="Folder to put the four MNIST .gz files in.")
def download(folder):
    """Download MNIST (needs internet; tests and CI never do this)."""
    click.echo(f"MNIST is in {mnist.download(folder)}; use --data-dir {folder}")
