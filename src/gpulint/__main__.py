from gpulint.cli import main
import sys
sys.exit(main())
