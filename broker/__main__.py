from broker.frontends.cli import main

main(prog_name="broker")
