from scheduler.cli.cli import main

main()
