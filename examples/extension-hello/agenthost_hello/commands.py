"""``core hello NAME``: print a greeting."""
import click

from .greeting import greet


@click.command(help="Print a greeting (from the agenthost-hello extension).")
@click.argument("name")
def hello(name):
    try:
        click.echo(greet(name))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
